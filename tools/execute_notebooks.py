"""Re-execute the lecture and solution notebooks in place, so stored outputs are current.

Then regenerate the exercises. Usage: `python tools/execute_notebooks.py [paths...]`
(default: every notebook in notebooks/ and solutions/). Prints each notebook's run time.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_exercises
from notebook_headers import ROOT


def execute(path: Path) -> float:
    """Run `path` top to bottom in its own directory and save it with its outputs.

    Cells marked `# NBVAL_SKIP` (they need the network) are left unrun, as nbval leaves
    them, and stored without outputs.
    """
    nb = nbformat.read(path, as_version=4)
    skipped = {i: cell for i, cell in enumerate(nb.cells) if is_skipped(cell)}
    nb.cells = [cell for i, cell in enumerate(nb.cells) if i not in skipped]
    start = time.perf_counter()
    NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        record_timing=False,  # no timestamps: re-running changes only what the code prints
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    seconds = time.perf_counter() - start
    for i, cell in sorted(skipped.items()):
        cell.outputs, cell.execution_count = [], None
        nb.cells.insert(i, cell)
    nbformat.write(nb, path)
    return seconds


def is_skipped(cell: nbformat.NotebookNode) -> bool:
    """nbval's rule: a code cell with a line that is just the comment `# NBVAL_SKIP`."""
    return cell.cell_type == "code" and any(
        line.strip().startswith("#") and line.strip().lstrip("#").strip() == "NBVAL_SKIP"
        for line in cell.source.splitlines()
    )


def main(paths: list[str]) -> None:
    targets = [Path(p).resolve() for p in paths] or sorted(
        [*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("solutions/*.ipynb")]
    )
    for path in targets:
        print(f"{path.relative_to(ROOT)}: {execute(path):.1f} s", flush=True)
    make_exercises.main(check=False)


if __name__ == "__main__":
    main(sys.argv[1:])
