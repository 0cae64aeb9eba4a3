"""Chapter 01's constant-work checks: `allocate`, `num_free`, `share` and `release` of one
block do the same work in a small and a large pool. Work is Python lines run plus container
entries touched (counted, never timed); seconds only as a backstop, as ratios between sizes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from paged_kv.course.checks.ch01_block_pool.pool_trials import pool_name
from paged_kv.course.checks.cost import (
    Meter,
    count_lines_executed,
    describe_touches,
    grows_in_time,
    instrument,
)
from paged_kv.course.checks.failures import CheckFailed, call, exercise, passed

_SIZES = (500, 20_000)  # half full: lines and entries touched
_TIMED_SIZES = (1_000, 200_000)  # fresh pools: seconds


@exercise(1, "allocate")
def check_constant_time_allocate(pool_cls: type) -> None:
    """`allocate` and `num_free` do the same work in a pool of 500 and of 20,000 blocks.

    Counts the Python lines run and the container entries touched (work done in C included)
    while filling each pool to half full, 10 blocks at a time, then for 10 more calls; these
    counts do not depend on how fast the machine is. As a backstop for work the counts cannot
    see, it times pools of 1,000 and 200,000 blocks and compares the two (a ratio).
    """

    def work(pool: Any, held: list[int]) -> None:
        for _ in range(10):
            pool.allocate(1)

    def count(pool: Any, held: list[int]) -> None:
        for _ in range(10):
            pool.num_free  # noqa: B018 (a property: reading it is the call)

    _constant_work(pool_cls, "allocate(1)", work, "allocate")
    _constant_work(pool_cls, "pool.num_free", count, "num_free")
    passed("the same work per allocate and num_free in pools of 500 and 20,000 blocks")


@exercise(2, "share and release")
def check_constant_time_release(pool_cls: type) -> None:
    """`share` and `release` of one block do the same work in a pool of 500 and of 20,000
    blocks (counted as in `check_constant_time_allocate`, which also fills the pools)."""

    def share(pool: Any, held: list[int]) -> None:
        for b in held[:: max(1, len(held) // 10)][:10]:
            pool.share([b])

    def release(pool: Any, held: list[int]) -> None:
        for b in held[:: max(1, len(held) // 10)][:10]:
            pool.release([b])

    _constant_work(pool_cls, "share([b])", share, "share")
    _constant_work(pool_cls, "release([b])", release, "release")
    passed("the same work per share and release in pools of 500 and 20,000 blocks")


def _constant_work(
    pool_cls: type, what: str, work: Callable[[Any, list[int]], None], method: str
) -> None:
    """Python lines and container entries per call must not grow from the small pool to the
    large one (both half full, filled 10 blocks at a time so that a scanning allocate is caught
    early, before a quadratic fill); then seconds, on fresh pools, as a backstop."""
    name = pool_name(pool_cls)
    small, large = _SIZES
    fill_cost = 0
    for size in _SIZES:
        pool = call(f"pool = {name}({size}, 16)", pool_cls, size, 16)
        meter = Meter()
        instrument(pool, meter, "self")
        held: list[int] = []
        for _ in range(size // 20):
            meter.reset()
            doing = f"pool.allocate(10) on a {size:,}-block pool"
            lines = count_lines_executed(
                lambda p=pool, h=held, d=doing: h.extend(call(d, p.allocate, 10))
            )
            cost = lines + meter.total
            if size == small:
                fill_cost = max(fill_cost, cost)
            elif cost > 2 * fill_cost + 50:
                raise CheckFailed(
                    ("" if method == "allocate" else _FILLS_WITH_ALLOCATE)
                    + f"one allocate(10) call cost at most {fill_cost:,} units of work (Python "
                    f"lines run plus container entries touched) while filling a {small:,}-block "
                    f"pool to half full, but {cost:,} in a {large:,}-block pool with "
                    f"{len(held) - 10:,} blocks already in use"
                    + (f", mostly by {describe_touches(meter, 1)}" if meter.total > lines else "")
                    + ": it scans the pool (or a container that grows with it). "
                    + _ADVICE["allocate"]
                )
        meter.reset()
        lines = count_lines_executed(
            lambda p=pool, h=held, s=size: call(
                f"10 calls of {what} on a half-full pool of {s:,} blocks", work, p, h
            )
        )
        if size == small:
            base_lines, base_touched = lines, meter.total
            continue
        if lines > 2 * base_lines + 20:
            raise CheckFailed(
                f"10 calls of {what} ran {base_lines:,} Python lines in a {small:,}-block pool "
                f"but {lines:,} in a {large:,}-block pool: it scans the pool. " + _ADVICE[method]
            )
        if meter.total > 2 * base_touched + 50:
            raise CheckFailed(
                f"10 calls of {what} touched {base_touched:,} container entries in a "
                f"{small:,}-block pool but {meter.total:,} in a {large:,}-block pool, mostly by "
                f"{describe_touches(meter, 10)}: a search, even one done in C "
                "(min, sorted, `in` on a list, list.remove, list.pop(0), list.index), grows "
                "with the pool. " + _ADVICE[method]
            )

    def make(size: int) -> tuple[Any, list[int]]:
        pool = pool_cls(size, 16)
        return pool, ([] if method == "allocate" else pool.allocate(30))

    def timed(state: tuple[Any, list[int]]) -> None:
        pool, held = state
        if method == "allocate":
            for _ in range(30):
                pool.allocate(1)
        elif method == "num_free":
            for _ in range(30):
                pool.num_free  # noqa: B018
        else:
            for b in held:
                getattr(pool, method)([b])

    ratio = grows_in_time(make, timed, _TIMED_SIZES)
    if ratio is not None:
        raise CheckFailed(
            f"{what} took {ratio:,.0f}× longer in a {_TIMED_SIZES[1]:,}-block pool than in a "
            f"{_TIMED_SIZES[0]:,}-block one (the fastest of 5 rounds, measured twice): it does "
            "work that grows with the pool, in C where the line and entry counts cannot see it "
            "(a `range`, an array or a new set built on each call?). " + _ADVICE[method]
        )


_FILLS_WITH_ALLOCATE = (
    "this check fills its pools with your allocate (exercise 1's code, fix it first): "
)

_ADVICE = {
    "num_free": "num_free must not count: keep the free ids in a container whose len() is the "
    "answer (your free list).",
    "allocate": "Keep the free ids in a structure you can pop from without searching "
    "(a list used as a stack, or a deque).",
    "share": "A reference count per block, in a list indexed by block id, is all share needs.",
    "release": "Validate with the reference counts (one list lookup per id), never by searching "
    "the free list; push freed ids onto the free list's cheap end.",
}
