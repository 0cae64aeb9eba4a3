"""Grade your own work: run exercise notebooks and report every check, passed or not.

    python -m paged_kv.course grade                     # exercises/*_exercises.ipynb
    python -m paged_kv.course grade exercises/01_block_pool_exercises.ipynb

Each notebook is executed from top to bottom in a fresh kernel, in its own folder (so parts
saved by one chapter reach the next), without touching the file. Every cell tagged `check`
is one verdict: passed, not done (a stub is still there) or failed, with the check's message.
The exit status is 0 only when every check passed and no other cell failed, so a CI job on
your fork goes red until the course is done. Unlike nbval, which accepts a check cell that
fails because the exercises carry `raises-exception`, this fails on any check that does not
pass.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PASSED, NOT_DONE, FAILED = "passed", "not done", "failed"
_MARK = {PASSED: "✅", NOT_DONE: "⏳", FAILED: "❌"}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LABEL = re.compile(r"^(?:✅ )?((?:Exercise \d+ \([^)]*\))|Capstone|Your parts so far)")


@dataclass
class Verdict:
    label: str
    status: str
    message: str = ""


@dataclass
class NotebookGrade:
    path: Path
    verdicts: list[Verdict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # cells other than checks that failed
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.errors and all(v.status == PASSED for v in self.verdicts)


def grade_notebook(path: Path, *, timeout: int = 600, kernel: str = "python3") -> NotebookGrade:
    """Execute `path` in a fresh kernel (in its folder) and grade each check cell."""
    try:
        import nbformat
        from nbclient import NotebookClient
    except ImportError as exc:  # the `test` extra has them
        raise SystemExit(
            f"grading needs nbclient, nbformat and ipykernel ({exc}): "
            "pip install -e '.[test,notebooks]'"
        ) from None
    nb = nbformat.read(path, as_version=4)
    began = time.perf_counter()
    NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=kernel,
        allow_errors=True,
        resources={"metadata": {"path": str(path.resolve().parent)}},
    ).execute()
    grade = NotebookGrade(path, seconds=time.perf_counter() - began)
    first_error = ""
    heading = ""
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            heading = _heading(cell.source) or heading
            continue
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if "check" in cell.metadata.get("tags", []):
            grade.verdicts.append(_verdict(cell, errors, heading, first_error, len(grade.verdicts)))
        elif errors:
            error = errors[0]
            text = f"cell {index} raised {error['ename']}: {_clean(error['evalue'])}"
            grade.errors.append(text + _first_line(cell.source))
            first_error = first_error or text
    return grade


def _verdict(cell: Any, errors: list[dict], heading: str, first_error: str, number: int) -> Verdict:
    printed = "".join(
        o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream"
    )
    if not errors:
        ticks = [line for line in printed.splitlines() if line.startswith("✅")]
        label = _label(ticks[0] if ticks else "", heading, number)
        return Verdict(label, PASSED, "; ".join(_strip_label(t[2:], label) for t in ticks))
    error = errors[0]
    message = _clean(error["evalue"])
    label = _label(message, heading, number)
    if error["ename"] == "ExerciseNotDone":
        detail = _strip_label(message, label).removeprefix("is not done yet: ")
        return Verdict(label, NOT_DONE, detail)
    if error["ename"] == "CheckFailed":
        return Verdict(label, FAILED, _strip_label(message, label))
    if error["ename"] == "NotImplementedError":
        return Verdict(label, NOT_DONE, message)
    cause = f" (an earlier cell failed first: {first_error})" if first_error else ""
    return Verdict(label, FAILED, f"the check cell raised {error['ename']}: {message}{cause}")


def _heading(source: str) -> str:
    for line in source.splitlines():
        match = re.match(r"^(#+\s+|\*\*)(.+?)(\*\*.*)?$", line.strip())
        if match:
            return match.group(2).strip(" .*")
    return ""


def _label(text: str, heading: str, number: int) -> str:
    match = _LABEL.match(text)
    if match:
        return match.group(1)
    return heading or f"check {number + 1}"


def _strip_label(message: str, label: str) -> str:
    return message[len(label) :].lstrip(": ") if message.startswith(label) else message


def _clean(text: str) -> str:
    return _ANSI.sub("", text).strip()


def _first_line(source: str) -> str:
    line = next((x for x in source.splitlines() if x.strip()), "")
    return f" (`{line.strip()[:70]}`)" if line else ""


def report(grades: list[NotebookGrade]) -> str:
    """The per-exercise summary, as text."""
    lines = []
    counts = {PASSED: 0, NOT_DONE: 0, FAILED: 0}
    for grade in grades:
        lines.append(f"{grade.path}  ({grade.seconds:.0f} s)")
        for verdict in grade.verdicts:
            counts[verdict.status] += 1
            lines.append(f"  {_MARK[verdict.status]} {verdict.status:<9} {verdict.label}")
            if verdict.status != PASSED and verdict.message:
                lines += [f"      {line}" for line in verdict.message.splitlines()]
        for error in grade.errors:
            lines.append(f"  ❌ error     {error}")
    errors = sum(len(g.errors) for g in grades)
    total = f"{counts[PASSED]} passed, {counts[NOT_DONE]} not done, {counts[FAILED]} failed" + (
        f", {errors} other cell(s) raised" if errors else ""
    )
    lines.append(f"Total: {total}")
    return "\n".join(lines)


def markdown(grades: list[NotebookGrade]) -> str:
    """The same summary as a Markdown table (for a CI job's summary page)."""
    rows = ["| notebook | exercise | verdict | message |", "|---|---|---|---|"]
    for grade in grades:
        name = grade.path.name
        for v in grade.verdicts:
            first = (v.message.splitlines()[0] if v.message else "").replace("|", "/")
            rows.append(f"| {name} | {v.label} | {_MARK[v.status]} {v.status} | {first} |")
        for error in grade.errors:
            rows.append(f"| {name} | (other cell) | ❌ error | {error.replace('|', '/')} |")
    return "\n".join(rows) + "\n"


def default_notebooks() -> list[Path]:
    return sorted(Path("exercises").glob("*_exercises.ipynb"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m paged_kv.course grade",
        description="Execute exercise notebooks and grade every check: passed, not done or "
        "failed. Exits with 1 unless every check passed.",
    )
    parser.add_argument(
        "notebooks", nargs="*", type=Path, help="default: exercises/*_exercises.ipynb"
    )
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (600)")
    args = parser.parse_args(argv)
    paths = args.notebooks or default_notebooks()
    if not paths:
        parser.error("no notebooks given and no exercises/*_exercises.ipynb here")
    missing = [p for p in paths if not p.exists()]
    if missing:
        parser.error(f"no such notebook: {', '.join(map(str, missing))}")
    grades = []
    for path in sorted(paths, key=lambda p: p.name):  # chapter order: parts flow forward
        print(f"grading {path} ...", flush=True)
        grades.append(grade_notebook(path, timeout=args.timeout))
    print(report(grades))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as out:
            out.write("## Exercise checks\n\n" + markdown(grades))
    return 0 if all(g.ok for g in grades) else 1


if __name__ == "__main__":
    sys.exit(main())
