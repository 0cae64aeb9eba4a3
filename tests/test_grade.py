"""`python -m paged_kv.course grade` runs a learner's notebooks and fails on any check that does
not pass: solutions pass, untouched exercises are "not done", a planted mistake "failed" with its
message, and the exit status says so."""

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from paged_kv.course import grade

ROOT = Path(__file__).resolve().parent.parent


def _copy(tmp_path, relative):
    target = tmp_path / Path(relative).name
    shutil.copy(ROOT / relative, target)
    return target


def test_a_solution_notebook_passes_every_check(tmp_path):
    result = grade.grade_notebook(_copy(tmp_path, "solutions/02_block_tables_solutions.ipynb"))
    assert [v.status for v in result.verdicts] == [grade.PASSED] * 4
    assert result.ok and not result.errors
    assert result.verdicts[0].label == "Exercise 1 (add_sequence and free_sequence)"
    assert result.verdicts[3].label == "Your parts so far"


def test_an_untouched_exercise_notebook_is_not_done(tmp_path):
    result = grade.grade_notebook(_copy(tmp_path, "exercises/02_block_tables_exercises.ipynb"))
    assert [v.status for v in result.verdicts] == [grade.NOT_DONE] * 4
    assert not result.ok and not result.errors
    assert "SequenceManager.__init__" in result.verdicts[0].message


def test_a_planted_mistake_fails_with_its_message_and_the_command_exits_1(tmp_path):
    path = _copy(tmp_path, "solutions/02_block_tables_solutions.ipynb")
    nb = nbformat.read(path, as_version=4)
    [cell] = [c for c in nb.cells if "def free_sequence" in c.source]
    assert "self.pool.release(table[::-1])" in cell.source
    cell.source = cell.source.replace("self.pool.release(table[::-1])", "self.pool.release(table)")
    nbformat.write(nb, path)
    done = subprocess.run(
        [sys.executable, "-m", "paged_kv.course", "grade", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    report = done.stdout
    assert "❌ failed    Exercise 1 (add_sequence and free_sequence)" in report
    assert "last block first" in report  # the check's own message, under the verdict
    assert "✅ passed    Exercise 3 (slot_mapping)" in report
    assert "Total: 3 passed, 0 not done, 1 failed" in report


def test_the_verdicts_read_the_check_cells_outputs():
    def cell(*outputs):
        return nbformat.v4.new_code_cell("checks.check_x(X)", outputs=list(outputs))

    ok = nbformat.v4.new_output("stream", name="stdout", text="✅ Exercise 2 (share): fine\n")
    stub = nbformat.v4.new_output(
        "error",
        ename="ExerciseNotDone",
        evalue="Exercise 1 (allocate) is not done yet: x",
        traceback=[],
    )
    wrong = nbformat.v4.new_output(
        "error", ename="CheckFailed", evalue="Capstone: request 0 differs", traceback=[]
    )
    other = nbformat.v4.new_output("error", ename="NameError", evalue="name 'X'", traceback=[])
    assert grade._verdict(cell(ok), [], "", "", 0) == grade.Verdict(
        "Exercise 2 (share)", grade.PASSED, "fine"
    )
    assert grade._verdict(cell(stub), [stub], "", "", 0).status == grade.NOT_DONE
    assert grade._verdict(cell(wrong), [wrong], "", "", 0) == grade.Verdict(
        "Capstone", grade.FAILED, "request 0 differs"
    )
    failed = grade._verdict(cell(other), [other], "Check exercise 3", "cell 4 raised X", 2)
    assert failed.label == "Check exercise 3" and "an earlier cell failed first" in failed.message


def test_the_command_explains_itself_and_refuses_what_is_not_there(tmp_path, capsys):
    from paged_kv.course.__main__ import main

    assert main(["--help"]) == 0 and "grade" in capsys.readouterr().out
    assert main(["frobnicate"]) == 2
    with pytest.raises(SystemExit):
        grade.main([str(tmp_path / "missing.ipynb")])


def test_the_grader_keeps_the_learners_parts_beside_their_notebooks(tmp_path, monkeypatch):
    """Run as a learner runs it (no PAGED_KV_PARTS, in their checkout), the grader's parts are
    theirs: a chapter's notebook saves into `exercises/my_paged_kv/`, and a later one loads it."""
    saving = (
        "from paged_kv.course import parts\n\n\ndef mine(t, b, salt=None):\n    return 'mine'\n"
    )
    loading = "from paged_kv.course import parts\n\nfound = parts.load('block_hasher')\n"
    loading += "assert found([], 4) == 'mine'\nprint('✅ Exercise 1 (load): your part')"
    for name, cells in {
        "01_save_exercises.ipynb": [saving, "parts.save(block_hasher=mine)"],
        "02_load_exercises.ipynb": [loading],
    }.items():
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
        nb.cells[-1].metadata["tags"] = ["check"]
        (tmp_path / "exercises").mkdir(exist_ok=True)
        nbformat.write(nb, tmp_path / "exercises" / name)
    monkeypatch.delenv("PAGED_KV_PARTS")
    monkeypatch.chdir(tmp_path)
    assert grade.main([]) == 0
    saved = tmp_path / "exercises" / "my_paged_kv" / "block_hasher.py"
    assert saved.exists() and "return 'mine'" in saved.read_text()
