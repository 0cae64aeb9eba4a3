"""Grade your own work: `python -m paged_kv.course grade [notebooks…]` runs each exercise
notebook (default: exercises/*_exercises.ipynb) top to bottom in a fresh kernel in its own
folder (so parts saved by one chapter reach the next), without touching the file, and reports
every cell tagged `check`: passed (only when the course's check itself left its mark, see
`check_marker`), not done (a stub is still there), not checked (the cell ran no check of the
course) or failed, with its message. A notebook that cannot be graded (no such file, not a
notebook, a cell past the timeout, a kernel that died) is reported as such, and grading goes
on; so is a notebook with no check cell (an exercise notebook always has some). It exits with 0
only when every notebook had checks, every check passed and nothing else failed, so a CI job on
a fork is red until the course is done (nbval is not: the check cells carry `raises-exception`).
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from paged_kv.course import check_marker

PASSED, NOT_DONE, NOT_CHECKED, FAILED = "passed", "not done", "not checked", "failed"
_MARK = {PASSED: "✅", NOT_DONE: "⏳", NOT_CHECKED: "❓", FAILED: "❌"}
_CALLED = re.compile(r"\b(check_\w+)\s*\(")  # the checks a check cell's source calls
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
    stopped: str = ""  # why the notebook was not (wholly) run, if it was not

    @property
    def unchecked(self) -> bool:
        """Run, but no cell of it is tagged `check` (emptied, or its checks deleted)."""
        return not self.stopped and not self.verdicts

    @property
    def ok(self) -> bool:
        passed = all(v.status == PASSED for v in self.verdicts)
        return passed and not self.errors and not self.stopped and not self.unchecked


def grade_notebook(path: Path, *, timeout: int = 600) -> NotebookGrade:
    """Execute `path` in a fresh kernel (in its folder) and grade each check cell; what stops
    it (the file, a cell's timeout, the kernel dying) is the grade's `stopped`."""
    try:
        import nbformat
        from nbclient import NotebookClient
        from nbclient.exceptions import CellTimeoutError, DeadKernelError
    except ImportError as exc:  # the `test` extra has them
        raise SystemExit(
            f"grading needs {exc.name}: pip install -e '.[course,test,notebooks]'"
        ) from None
    began, running = time.perf_counter(), 0
    nb, unreadable = _read(path, nbformat)
    if nb is None:
        return NotebookGrade(path, stopped=unreadable)

    def started(cell: Any, cell_index: int) -> None:
        nonlocal running
        running = cell_index

    nonce, folder = secrets.token_hex(16), {"metadata": {"path": str(path.resolve().parent)}}
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        allow_errors=True,
        resources=folder,
        on_cell_start=started,
    )
    stopped = ""
    try:
        client.execute(env={**os.environ, check_marker.NONCE: nonce})
    except CellTimeoutError:
        stopped = f"cell {running} was still running after the timeout of {timeout} s"
    except DeadKernelError:
        stopped = f"the kernel died in cell {running} (did the code exit, or run out of memory?)"
    grade = NotebookGrade(path, seconds=time.perf_counter() - began, stopped=stopped)
    heading = first_error = ""
    for index, cell in enumerate(nb.cells):
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if cell.cell_type == "markdown":
            heading = next(iter(_HEADING.findall(cell.source)), heading).strip(" .*")
        elif "check" in cell.metadata.get("tags", []):
            number = len(grade.verdicts)
            if stopped and index >= running:
                label = _label("", heading, number)
                grade.verdicts.append(Verdict(label, FAILED, f"not graded: {stopped}"))
                continue
            verdict = _verdict(cell, errors, heading, first_error, number, nonce)
            grade.verdicts.append(verdict)
        elif errors and not (stopped and index == running):
            text = f"cell {index} raised {errors[0]['ename']}: {errors[0]['evalue'].strip()}"
            line = next((x.strip()[:70] for x in cell.source.splitlines() if x.strip()), "")
            grade.errors.append(f"{text} (`{line}`)" if line else text)
            first_error = first_error or text
    return grade


def _read(path: Path, nbformat: ModuleType) -> tuple[Any, str]:
    """The notebook at `path`, or None and why it is none."""
    if path.is_dir():
        return None, "it is a folder, not a notebook: name the .ipynb files in it"
    if not path.exists():
        return None, "there is no such file"
    try:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    except OSError as exc:
        return None, f"it cannot be read: {exc.strerror or exc}"
    except Exception as exc:  # nbformat raises many types on a damaged file: all mean the same
        said = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        return None, f"it is not a valid notebook ({type(exc).__name__}: {said})"
    return nb, ""


def _verdict(
    cell: Any, errors: list[dict], heading: str, first_error: str, number: int, nonce: str
) -> Verdict:
    """A check cell's verdict: the marks its checks left (with `nonce`), or the error it raised."""
    if not errors:
        marks = check_marker.marks(cell.get("outputs", []), nonce)
        label = _label(next((m["label"] for m in marks if m["label"]), ""), heading, number)
        done = {m["check"] for m in marks}
        missing = [name for name in dict.fromkeys(_CALLED.findall(cell.source)) if name not in done]
        if marks and not missing:
            return Verdict(label, PASSED, "; ".join(m["what"] for m in marks))
        ran = f"`{missing[0]}` of the course did not run and pass" if missing else "it ran no check"
        return Verdict(
            label,
            NOT_CHECKED,
            f"the cell ran, but {ran} (commented out, or a function of the same name defined "
            "in the notebook?): call the course's check, as in `checks.check_...(YourClass)`",
        )
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


_NO_CHECKS = (
    "no cell is tagged `check`, so nothing was graded; an exercise notebook always has "
    "checks: take a fresh copy of it from the course's exercises/"
)


def report(grades: list[NotebookGrade]) -> str:
    """The per-exercise summary, as text."""
    lines, count = [], Counter(v.status for grade in grades for v in grade.verdicts)
    for grade in grades:
        lines.append(f"{grade.path}  ({grade.seconds:.0f} s)")
        if grade.stopped:
            lines.append(f"  ❌ not graded: {grade.stopped}")
        if grade.unchecked:
            lines.append(f"  ❌ no checks: {_NO_CHECKS}")
        for v in grade.verdicts:
            lines.append(f"  {_MARK[v.status]} {v.status:<11} {v.label}")
            lines += [f"      {x}" for x in v.message.splitlines() if v.status != PASSED]
        lines += [f"  ❌ error       {error}" for error in grade.errors]
    total = f"Total: {count[PASSED]} passed, {count[NOT_DONE]} not done"
    total += f", {count[NOT_CHECKED]} not checked, {count[FAILED]} failed"
    errors = sum(len(g.errors) for g in grades)
    stopped = sum(bool(g.stopped) for g in grades)
    unchecked = sum(g.unchecked for g in grades)
    total += f", {errors} other cell(s) raised" if errors else ""
    total += f", {unchecked} notebook(s) without checks" if unchecked else ""
    lines.append(total + (f", {stopped} notebook(s) not graded" if stopped else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paged_kv.course grade", description=__doc__)
    parser.add_argument(
        "notebooks", nargs="*", type=Path, help="default: exercises/*_exercises.ipynb"
    )
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (600)")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(Path("exercises").glob("*_exercises.ipynb"))
    if not paths:
        parser.error("no notebook to grade: exercises/*_exercises.ipynb matches nothing here")
    grades = []
    for path in sorted(paths, key=lambda p: p.name):  # chapter order: parts flow forward
        print(f"grading {path} ...", flush=True)
        grades.append(grade_notebook(path, timeout=args.timeout))
    print(summary := report(grades))
    if os.environ.get("GITHUB_STEP_SUMMARY"):  # a CI job's summary page shows it too
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a") as out:
            out.write(f"## Exercise checks\n\n```\n{summary}\n```\n")
    return 0 if all(g.ok for g in grades) else 1
