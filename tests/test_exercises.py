"""Executing an exercise notebook fails in every check cell with "not done yet", and nothing else.

That proves the stubs are real and that each check calls the learner's code; the failure is
the check's one-line message (ExerciseNotDone), never a traceback into the checks or the library.
(The solutions are executed by nbval with the rest of the notebooks and must pass; the grader's
own tests, tests/test_grade.py, grade a solution, a stub and a planted mistake.)
"""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
EXERCISES = sorted((ROOT / "exercises").glob("*.ipynb"))


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.name)
def test_every_check_cell_fails_with_not_implemented(path):
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, timeout=120, allow_errors=True, resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    check_cells = [c for c in nb.cells if "check" in c.metadata.get("tags", [])]
    assert check_cells
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if cell in check_cells:
            assert [e.ename for e in errors] == ["ExerciseNotDone"], cell.source
            assert "not done yet" in errors[0].evalue
            assert "still has its stub" in errors[0].evalue
            shown = "\n".join(errors[0].traceback)
            assert "paged_kv/" not in shown and "File " not in shown, shown  # no traceback
        else:
            assert not errors, f"a non-check cell failed: {cell.source[:80]}"
