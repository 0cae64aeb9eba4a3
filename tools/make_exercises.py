"""Generate exercises/ from solutions/: every solution region becomes a stub.

In a solution notebook, code between `### BEGIN SOLUTION` and `### END SOLUTION` (inside a
function or method) becomes `raise NotImplementedError(...)`; `# Hint:` lines right after
BEGIN stay as comments. Outputs are cleared, and cells tagged `check` get nbval's
`raises-exception` tag, since they fail until the learner fills the stubs.
Run `python tools/make_exercises.py` after editing a solution; `--check` only compares.
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from notebook_headers import ROOT, with_headers

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
DEF = re.compile(r"^\s*def (\w+)\(")
CLASS = re.compile(r"^\s*class (\w+)\b")


def stub_source(source: str, where: str) -> str:
    """`source` with each solution region replaced by a hint and a NotImplementedError."""
    out: list[str] = []
    lines = source.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() != BEGIN:
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        if not indent:
            raise ValueError(f"{where}: solution regions must sit inside a function body")
        name = _enclosing_name(out)
        i += 1
        while i < len(lines) and lines[i].strip().startswith("# Hint:"):
            out.append(lines[i])
            i += 1
        while i < len(lines) and lines[i].strip() != END:
            i += 1
        if i == len(lines):
            raise ValueError(f"{where}: {BEGIN} without {END}")
        out.append(f'{indent}raise NotImplementedError("{name}: replace this line with your code")')
        i += 1
    return "\n".join(out)


def _enclosing_name(lines: list[str]) -> str:
    """`Class.method` or `function` of the def that the region sits in."""
    for i in range(len(lines) - 1, -1, -1):
        match = DEF.match(lines[i])
        if not match:
            continue
        indent = len(lines[i]) - len(lines[i].lstrip())
        for above in reversed(lines[:i]):
            klass = CLASS.match(above)
            if klass and len(above) - len(above.lstrip()) < indent:
                return f"{klass.group(1)}.{match.group(1)}"
            if above.strip() and len(above) - len(above.lstrip()) < indent:
                break
        return match.group(1)
    return "this exercise"


def exercise_path(solution: Path) -> Path:
    """solutions/NN_topic_solutions.ipynb -> exercises/NN_topic_exercises.ipynb."""
    name = solution.name.replace("_solutions.ipynb", "_exercises.ipynb")
    return ROOT / "exercises" / name


def make_exercise(solution: nbformat.NotebookNode, relative_path: str) -> nbformat.NotebookNode:
    """The exercise notebook for `solution`, to be stored at `relative_path`."""
    nb = copy.deepcopy(solution)
    nb.cells[0].source = nb.cells[0].source.replace(" — solutions", "", 1)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        cell.source = stub_source(cell.source, f"{relative_path} cell {index}")
        cell.metadata.pop("execution", None)
        cell.outputs = []
        cell.execution_count = None
        tags = cell.metadata.get("tags", [])
        if "check" in tags:
            cell.metadata["tags"] = [*tags, "raises-exception"]
    nb.metadata.pop("widgets", None)
    with_headers(nb, relative_path)
    return nb


def expected_exercises() -> dict[Path, str]:
    """Exercise path -> the exact text the generator makes for it."""
    result = {}
    for solution in sorted((ROOT / "solutions").glob("*_solutions.ipynb")):
        target = exercise_path(solution)
        nb = make_exercise(
            nbformat.read(solution, as_version=4), target.relative_to(ROOT).as_posix()
        )
        result[target] = nbformat.writes(nb) + "\n"
    return result


def main(check: bool) -> int:
    stale = []
    for path, text in expected_exercises().items():
        if not path.exists() or path.read_text() != text:
            stale.append(str(path.relative_to(ROOT)))
            if not check:
                path.write_text(text)
    print("\n".join(stale) or "exercises are up to date")
    return 1 if stale and check else 0


if __name__ == "__main__":
    sys.exit(main(check="--check" in sys.argv))
