"""Wrong answers as data: each tests/wrong/chNN/<name>.py changes a piece of chapter NN's
solution (loaded from the solution notebook, never copied) and must fail the check its header
names with the cause key its header names. Right answers (the solutions, and the library's
own classes) pass every check.

A wrong answer's file starts with one line, then Python run in the namespace of the solution
notebook's cells (check cells left out):

    # expect: <cause key, or not_done for a stub> from <the check call>

The Python either defines the wrong answer (a subclass overriding one method, a function) or
calls `patch(old, new)`: the one solution cell holding `old` runs again with `new` in its place,
so the wrong answer is the solution with one mistake, under the solution's own names. Calls
compose: a second `patch` on the same cell keeps the first.

The checks' time cap is 10 s on 2 idle cores; the shared test machine is not idle, so the
tests give every check 60 s, except the answers expected to be `too_slow`.
"""

from __future__ import annotations

import functools
import json
import linecache
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from IPython.core.inputtransformer2 import TransformerManager

from paged_kv.course import checks
from paged_kv.course.checks import CheckFailed, ExerciseNotDone, failures

ROOT = Path(__file__).resolve().parent.parent
WRONG = sorted((Path(__file__).parent / "wrong").glob("ch*/*.py"))

# The library's own classes and functions, each passing its chapter's checks.
LIBRARY_ANSWERS = {
    "01": [
        "from paged_kv import BlockPool",
        "check_allocate(BlockPool)",
        "check_constant_time_allocate(BlockPool)",
        "check_release(BlockPool)",
        "check_constant_time_release(BlockPool)",
        "check_free_pages(BlockPool)",
    ],
    "02": [
        "from paged_kv import BlockPool\n"
        "from paged_kv.course.learner_manager import learner_manager\n"
        "def library_manager(pool):\n"
        "    return learner_manager(pool.num_blocks, pool.block_size, prefix_caching=False,"
        " pool=lambda n, size: pool)",
        "check_add_and_free(library_manager)",
        "check_append(library_manager)",
        "check_manager_slots(library_manager)",
        "check_parts_so_far(library_manager, BlockPool)",
    ],
    "03": [
        "from paged_kv.cache.eviction import FIFO, LFU, LRU, AgingLFU\n"
        "class LibraryLFU(LFU):\n"
        "    set_count = LFU._set_count",
        "check_lfu(LibraryLFU)",
        "check_aging(AgingLFU)",
        "check_policy_contract(LRU)",
        "check_policy_contract(FIFO)",
        "check_policy_contract(LFU)",
        "check_policy_contract(AgingLFU)",
    ],
    "05": [
        "from paged_kv.attention import paged_decode\n"
        "from paged_kv.attention.reference import merge_partials\n"
        "from paged_kv.attention.storage import write_kv",
        "check_lse_merge(merge_partials)",
        "check_paged_decode(paged_decode)",
        "check_write_kv(write_kv)",
    ],
    "06": [
        "from paged_kv.serving.scheduler import Scheduler",
        "check_admission(Scheduler)",
        "check_preemption(Scheduler)",
        "check_serves_like_dense(Scheduler)",
        "check_capstone(Scheduler, parts={})",
    ],
    "07": [
        "from paged_kv.tiers import CircuitBreaker, decode_blob, encode_blob, longest_run",
        "check_blob_codec(encode_blob, decode_blob)",
        "check_longest_run(longest_run)",
        "check_circuit_breaker(CircuitBreaker)",
    ],
}


def _exec_cell(code: str, name: str, namespace: dict[str, Any]) -> None:
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)  # as IPython does
    exec(compile(code, name, "exec"), namespace)


@functools.cache
def _solution(chapter: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The names chapter `chapter`'s solution notebook defines, and the code of the cells
    that define them by cell name (the cells that run checks or save parts left out)."""
    (notebook,) = ROOT.glob(f"solutions/{chapter}_*_solutions.ipynb")
    namespace: dict[str, Any] = {"__name__": f"solutions_{chapter}"}
    cells: dict[str, str] = {}
    for i, cell in enumerate(json.loads(notebook.read_text())["cells"]):
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or "check" in cell["metadata"].get("tags", []):
            continue
        if "parts.save(" in source or "checks." in source:  # saving parts, running checks
            continue
        name = f"<{notebook.name} cell {i}>"
        cells[name] = TransformerManager().transform_cell(source)
        _exec_cell(cells[name], name, namespace)
    return namespace, cells


def solution(chapter: str) -> dict[str, Any]:
    return _solution(chapter)[0]


def patcher(chapter: str, namespace: dict[str, Any]) -> Callable[[str, str], None]:
    """`patch(old, new)`: run again, in `namespace`, the one solution cell holding `old` once,
    with `new` in its place (and the earlier patches of that cell kept)."""
    patched = dict(_solution(chapter)[1])

    def patch(old: str, new: str) -> None:
        holding = [n for n, code in patched.items() if code.count(old) == 1]
        assert len(holding) == 1, f"{len(holding)} solution cells hold {old!r} once, not 1"
        (name,) = holding
        patched[name] = patched[name].replace(old, new)
        _exec_cell(patched[name], f"{name} patched", namespace)

    return patch


def _run(chapter: str, namespace: dict[str, Any], call: str) -> None:
    namespace = {**namespace, **{n: getattr(checks, n) for n in checks.__all__}}
    exec(compile(call, f"<wrong answer for chapter {chapter}>", "exec"), namespace)


def _header(path: Path) -> tuple[str, str]:
    cause, _, check = (
        path.read_text().splitlines()[0].removeprefix("# expect: ").partition(" from ")
    )
    assert cause and check, f"{path}: the first line must be '# expect: <cause> from <check>'"
    return cause, check


@pytest.fixture(autouse=True)
def _loaded_machine_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(failures, "CAP_SECONDS", 60.0)


@pytest.mark.parametrize("path", WRONG, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_wrong_answer_fails_with_its_cause(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chapter = path.parent.name.removeprefix("ch")
    cause, check = _header(path)
    if cause == "too_slow":
        monkeypatch.setattr(failures, "CAP_SECONDS", 10.0)
    namespace = dict(solution(chapter))
    namespace["patch"] = patcher(chapter, namespace)
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    with pytest.raises((CheckFailed, ExerciseNotDone)) as failure:
        _run(chapter, namespace, check)
    got = "not_done" if isinstance(failure.value, ExerciseNotDone) else failure.value.cause
    assert got == cause, str(failure.value)
    assert "Traceback" not in str(failure.value)


RIGHT = [(ch, line) for ch, lines in LIBRARY_ANSWERS.items() for line in lines[1:]]


@pytest.mark.parametrize(("chapter", "call"), RIGHT, ids=[f"{c}:{x}" for c, x in RIGHT])
def test_the_library_passes_its_chapters_checks(chapter: str, call: str) -> None:
    namespace: dict[str, Any] = {}
    exec(LIBRARY_ANSWERS[chapter][0], namespace)
    _run(chapter, namespace, call)


SOLUTION_CHECKS = [
    (nb.name[:2], i)
    for nb in sorted(ROOT.glob("solutions/0[1-7]_*_solutions.ipynb"))
    for i, cell in enumerate(json.loads(nb.read_text())["cells"])
    if "check" in cell["metadata"].get("tags", [])
    and "check_capstone" not in "".join(cell["source"])  # the saved parts: the notebook runs it
]


@pytest.mark.parametrize(("chapter", "cell"), SOLUTION_CHECKS)
def test_the_solutions_pass_their_checks(chapter: str, cell: int) -> None:
    (notebook,) = ROOT.glob(f"solutions/{chapter}_*_solutions.ipynb")
    source = "".join(json.loads(notebook.read_text())["cells"][cell]["source"])
    _run(chapter, solution(chapter), TransformerManager().transform_cell(source))
