"""Run every lecture many times on a busy machine and count the claims that fail.

    python tools/claim_soak.py                    # every notebooks/*.ipynb, 10 runs each
    python tools/claim_soak.py --runs 2 notebooks/01_block_pool.ipynb
    python tools/claim_soak.py --jobs 2 --save    # two at once; bench/results/claim_soak.json

A cell tagged `claim` asserts what the lecture's prose says about the outputs beside it; a
claim that holds on the author's idle machine but not on a learner's busy one is a false
sentence some of the time. This tool runs each lecture `--runs` times with nbclient (as
tools/execute_notebooks.py does: in its own directory, `# NBVAL_SKIP` cells left out, every
cell run even after one fails, as nbval runs them) beside a CPU hog of `--hog` busy processes
that it starts and stops itself (each also stops by itself at the tool's deadline). Per
notebook it reports the runs, the claim cells that failed (cell index, the line that raised,
the error), the other failures, and the median and longest run time. Stored outputs are not
compared and the notebooks are not written.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "claim_soak.json"
CLAIM_TAG = "claim"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RAISING_LINE = re.compile(r"^-*> ?(\d+)\s(.*)$")  # IPython's arrow at the line that raised


@dataclass
class Failure:
    """One cell that raised in one run."""

    cell: int  # index in the notebook as stored (skipped cells counted)
    line: str  # the cell's line that raised, as IPython's traceback shows it ("" if none)
    error: str  # "AssertionError: ..." (the exception's name and message)


@dataclass
class Run:
    """One execution of one notebook."""

    notebook: str
    round: int  # 0 for each notebook's first run
    seconds: float
    claim_failures: list[Failure] = field(default_factory=list)
    other_failures: list[Failure] = field(default_factory=list)


def is_skipped(cell: nbformat.NotebookNode) -> bool:
    """nbval's rule: a code cell with a line that is just the comment `# NBVAL_SKIP`."""
    return cell.cell_type == "code" and any(
        line.strip().startswith("#") and line.strip().lstrip("#").strip() == "NBVAL_SKIP"
        for line in cell.source.splitlines()
    )


def is_claim(cell: nbformat.NotebookNode) -> bool:
    return CLAIM_TAG in cell.get("metadata", {}).get("tags", [])


def failure_of(index: int, err: CellExecutionError) -> Failure:
    """Where `err` was raised in cell `index`: the first line IPython's traceback marks with
    its arrow (the cell's own frame comes first), and the error's name and message."""
    line = ""
    for text in _ANSI.sub("", err.traceback).splitlines():
        found = _RAISING_LINE.match(text.strip())
        if found:
            line = found.group(2).strip()
            break
    message = (err.evalue or "").strip().splitlines()
    return Failure(index, line, f"{err.ename}: {message[0] if message else ''}".rstrip(": "))


def run_notebook(path: Path, timeout: int = 600, round: int = 0) -> Run:
    """Execute `path` once, top to bottom in its own directory, every cell even after one
    fails; sort the cells that raised into claim cells and the others. The notebook on disk
    is not changed."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    )
    run = Run(notebook=path.name, round=round, seconds=0.0)
    start = time.perf_counter()
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or is_skipped(cell):
                continue
            try:
                client.execute_cell(cell, index)
            except CellTimeoutError as err:
                run.other_failures.append(Failure(index, "", f"timeout: {err}"))
                break  # the kernel is still busy with this cell
            except CellExecutionError as err:
                failures = run.claim_failures if is_claim(cell) else run.other_failures
                failures.append(failure_of(index, err))
    run.seconds = time.perf_counter() - start
    return run


_SPIN = "import time, sys\ndeadline = float(sys.argv[1])\nwhile time.time() < deadline:\n    pass\n"


@contextmanager
def cpu_hog(processes: int, seconds: float) -> Iterator[list[subprocess.Popen]]:
    """`processes` Python processes that each keep a core busy until the block ends, and
    that stop by themselves after `seconds` even if this process dies first."""
    deadline = time.time() + seconds
    hogs = [
        subprocess.Popen([sys.executable, "-c", _SPIN, str(deadline)]) for _ in range(processes)
    ]
    try:
        yield hogs
    finally:
        for hog in hogs:
            hog.terminate()
        for hog in hogs:
            hog.wait()


def summarize(runs: list[Run]) -> dict[str, dict]:
    """Per notebook (in the order first seen): runs, failures and run times."""
    by_notebook: dict[str, list[Run]] = {}
    for run in runs:
        by_notebook.setdefault(run.notebook, []).append(run)
    summary = {}
    for name, mine in by_notebook.items():
        seconds = [r.seconds for r in mine]
        summary[name] = {
            "runs": len(mine),
            "claim_failures": [
                {"round": r.round, **asdict(f)} for r in mine for f in r.claim_failures
            ],
            "other_failures": [
                {"round": r.round, **asdict(f)} for r in mine for f in r.other_failures
            ],
            "runs_with_claim_failures": sum(bool(r.claim_failures) for r in mine),
            "median_s": round(statistics.median(seconds), 1),
            "max_s": round(max(seconds), 1),
        }
    return summary


def table(summary: dict[str, dict]) -> str:
    """The report: one row per notebook, then each failure."""
    head = f"{'notebook':34} {'runs':>4} {'claim fails':>11} {'other fails':>11}"
    head += f" {'median s':>8} {'max s':>6}"
    rows = [head, "-" * len(head)]
    for name, s in summary.items():
        claims, others = len(s["claim_failures"]), len(s["other_failures"])
        times = f"{s['median_s']:8.1f} {s['max_s']:6.1f}"
        rows.append(f"{name:34} {s['runs']:4} {claims:11} {others:11} {times}")
    for name, s in summary.items():
        for kind in ("claim_failures", "other_failures"):
            for f in s[kind]:
                where = f"{name} run {f['round'] + 1} cell {f['cell']} ({kind[:5]})"
                rows.append(f"{where}: {f['line']}  -> {f['error']}")
    return "\n".join(rows)


def build_kernel() -> None:
    """Build the C++ decode kernel first (as conftest.py does for pytest), so that no run of
    chapter 05 pays for the build."""
    from paged_kv.attention import cpu_decode

    if cpu_decode.built_library() is None:
        try:
            cpu_decode.build(out=sys.stdout)
        except cpu_decode.BuildError as err:
            print(f"the C++ CPU decode kernel did not build: {err}", flush=True)


def soak(paths: list[Path], runs: int, jobs: int, timeout: int) -> list[Run]:
    """Each notebook `runs` times, in rounds (every notebook once, then again), `jobs` at once,
    each run printed as it ends."""
    order = [(path, round) for round in range(runs) for path in paths]
    done: list[Run] = []
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        notebooks, rounds = [p for p, _ in order], [r for _, r in order]
        for run in pool.map(run_notebook, notebooks, [timeout] * len(order), rounds):
            claims, others = len(run.claim_failures), len(run.other_failures)
            print(
                f"{run.notebook} run {run.round + 1}: {run.seconds:.1f} s,"
                f" {claims} claim, {others} other failures"
            )
            for f in run.claim_failures + run.other_failures:
                print(f"    cell {f.cell}: {f.line}  -> {f.error}", flush=True)
            done.append(run)
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="default: every notebooks/*.ipynb")
    parser.add_argument("--runs", type=int, default=10, help="runs of each notebook (10)")
    parser.add_argument("--hog", type=int, default=2, help="busy processes beside them (2)")
    parser.add_argument("--jobs", type=int, default=1, help="notebooks run at once (1)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds a cell may take")
    parser.add_argument(
        "--max-hours", type=float, default=3.0, help="the hog stops by itself after this (3)"
    )
    parser.add_argument("--save", action="store_true", help=f"write {RESULTS.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    paths = [Path(p).resolve() for p in args.notebooks] or sorted(ROOT.glob("notebooks/*.ipynb"))
    if args.runs < 1 or args.jobs < 1 or args.hog < 0 or not paths:
        parser.error("--runs and --jobs must be at least 1, --hog at least 0, notebooks found")
    build_kernel()
    start = time.time()
    with cpu_hog(args.hog, args.max_hours * 3600):
        runs = soak(paths, args.runs, args.jobs, args.timeout)
    summary = summarize(runs)
    print(table(summary))
    if args.save:
        payload = {
            "tool": "tools/claim_soak.py",
            "runs": args.runs,
            "hog_processes": args.hog,
            "jobs": args.jobs,
            "minutes": round((time.time() - start) / 60, 1),
            "machine": {
                "python": platform.python_version(),
                "system": platform.platform(),
                "cores": os.cpu_count(),
            },
            "notebooks": summary,
        }
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 1 if any(s["claim_failures"] or s["other_failures"] for s in summary.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
