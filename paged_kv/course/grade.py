"""Grade your own work: `python -m paged_kv.course grade [notebooks…]` runs each exercise
notebook (default: exercises/*_exercises.ipynb) top to bottom in a fresh kernel in its own
folder (so parts saved by one chapter reach the next), without touching the file, and reports
every cell tagged `check`: passed, not done (a stub is still there) or failed, with its message.
It exits with 0 only when every check passed and no other cell failed, so a CI job on a fork is
red until the course is done (nbval is not: the exercises' check cells carry `raises-exception`).
"""

from __future__ import annotations

import argparse
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PASSED, NOT_DONE, FAILED = "passed", "not done", "failed"
_MARK = {PASSED: "✅", NOT_DONE: "⏳", FAILED: "❌"}
_LABEL = re.compile(r"^((?:Exercise \d+ \([^)]*\))|Capstone|Your parts so far)")
_HEADING = re.compile(r"^[ \t]*(?:#+\s+|\*\*)(.+?)(?:\*\*.*)?$", re.MULTILINE)


@dataclass
class Verdict:
    label: str
    status: str
    message: str = ""


@dataclass
class NotebookGrade:
    path: Path
    verdicts: list[Verdict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # cells other than checks that raised
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.errors and all(v.status == PASSED for v in self.verdicts)


def grade_notebook(path: Path, *, timeout: int = 600) -> NotebookGrade:
    """Execute `path` in a fresh kernel (in its folder) and grade each check cell."""
    try:
        import nbformat
        from nbclient import NotebookClient
    except ImportError as exc:  # the `test` extra has them
        raise SystemExit(
            f"grading needs {exc.name}: pip install -e '.[course,test,notebooks]'"
        ) from None
    nb = nbformat.read(path, as_version=4)
    began, folder = time.perf_counter(), {"metadata": {"path": str(path.resolve().parent)}}
    NotebookClient(
        nb, timeout=timeout, kernel_name="python3", allow_errors=True, resources=folder
    ).execute()
    grade = NotebookGrade(path, seconds=time.perf_counter() - began)
    heading = first_error = ""
    for index, cell in enumerate(nb.cells):
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if cell.cell_type == "markdown":
            heading = next(iter(_HEADING.findall(cell.source)), heading).strip(" .*")
        elif "check" in cell.metadata.get("tags", []):
            number = len(grade.verdicts)
            grade.verdicts.append(_verdict(cell, errors, heading, first_error, number))
        elif errors:
            text = f"cell {index} raised {errors[0]['ename']}: {errors[0]['evalue'].strip()}"
            line = next((x.strip()[:70] for x in cell.source.splitlines() if x.strip()), "")
            grade.errors.append(f"{text} (`{line}`)" if line else text)
            first_error = first_error or text
    return grade


def _verdict(cell: Any, errors: list[dict], heading: str, first_error: str, number: int) -> Verdict:
    """A check cell's verdict: the `✅` lines it printed, or the error it raised."""
    if not errors:
        printed = "".join(o.get("text", "") for o in cell.get("outputs", []))
        ticks = [line[2:] for line in printed.splitlines() if line.startswith("✅ ")]
        label = _label(ticks[0] if ticks else "", heading, number)
        return Verdict(label, PASSED, "; ".join(_without(label, t) for t in ticks))
    name, message = errors[0]["ename"], errors[0]["evalue"].strip()
    label = _label(message, heading, number)
    if name in ("ExerciseNotDone", "NotImplementedError"):
        return Verdict(label, NOT_DONE, _without(label, message).removeprefix("is not done yet: "))
    if name == "CheckFailed":
        return Verdict(label, FAILED, _without(label, message))
    cause = f" (an earlier cell failed first: {first_error})" if first_error else ""
    return Verdict(label, FAILED, f"the check cell raised {name}: {message}{cause}")


def _label(text: str, heading: str, number: int) -> str:
    match = _LABEL.match(text)
    return match.group(1) if match else heading or f"check {number + 1}"


def _without(label: str, message: str) -> str:
    return message.removeprefix(label).lstrip(": ")


def report(grades: list[NotebookGrade]) -> str:
    """The per-exercise summary, as text."""
    lines, count = [], Counter(v.status for grade in grades for v in grade.verdicts)
    for grade in grades:
        lines.append(f"{grade.path}  ({grade.seconds:.0f} s)")
        for v in grade.verdicts:
            lines.append(f"  {_MARK[v.status]} {v.status:<9} {v.label}")
            lines += [f"      {x}" for x in v.message.splitlines() if v.status != PASSED]
        lines += [f"  ❌ error     {error}" for error in grade.errors]
    total = f"Total: {count[PASSED]} passed, {count[NOT_DONE]} not done, {count[FAILED]} failed"
    errors = sum(len(g.errors) for g in grades)
    lines.append(total + (f", {errors} other cell(s) raised" if errors else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paged_kv.course grade", description=__doc__)
    parser.add_argument(
        "notebooks", nargs="*", type=Path, help="default: exercises/*_exercises.ipynb"
    )
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (600)")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(Path("exercises").glob("*_exercises.ipynb"))
    missing = [str(p) for p in paths if not p.exists()]
    if not paths or missing:
        parser.error(f"no such notebook: {', '.join(missing) or 'exercises/*_exercises.ipynb'}")
    grades = []
    for path in sorted(paths, key=lambda p: p.name):  # chapter order: parts flow forward
        print(f"grading {path} ...", flush=True)
        grades.append(grade_notebook(path, timeout=args.timeout))
    print(summary := report(grades))
    if os.environ.get("GITHUB_STEP_SUMMARY"):  # a CI job's summary page shows it too
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as out:
            out.write(f"## Exercise checks\n\n```\n{summary}\n```\n")
    return 0 if all(g.ok for g in grades) else 1
