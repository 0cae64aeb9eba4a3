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
    """Run `path` top to bottom in its own directory and save it with its outputs."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        record_timing=False,  # no timestamps: re-running changes only what the code prints
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    seconds = time.perf_counter() - start
    nbformat.write(nb, path)
    return seconds


def main(paths: list[str]) -> None:
    targets = [Path(p).resolve() for p in paths] or sorted(
        [*ROOT.glob("notebooks/*.ipynb"), *ROOT.glob("solutions/*.ipynb")]
    )
    for path in targets:
        print(f"{path.relative_to(ROOT)}: {execute(path):.1f} s", flush=True)
    make_exercises.main(check=False)


if __name__ == "__main__":
    main(sys.argv[1:])
