"""How the benchmarks measure: pinned torch threads, runs taken in turn, median and spread.

Every script reports the median of at least `MIN_RUNS` runs with their spread (min–max and the
interquartile range), never the best run: the best run says how fast the machine can be on a
lucky moment, the median what a reader will see. A baseline and what it is compared to run in
turn, run by run (`take_turns`), so that background load falls on both alike.
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

import torch

T = TypeVar("T")

MIN_RUNS = 5


def pin_threads(n: int) -> int:
    """Fix torch's intra-op thread count (timings depend on it) and say so."""
    torch.set_num_threads(n)
    threads = torch.get_num_threads()
    print(f"torch threads: {threads} (pinned with torch.set_num_threads)")
    return threads


def spread(values: Sequence[float]) -> dict[str, float | int]:
    """Median, quartiles and extremes of `values` (at least one)."""
    xs = sorted(values)
    if len(xs) >= 2:
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    else:
        q1 = q3 = xs[0]
    return {
        "median": statistics.median(xs),
        "q1": q1,
        "q3": q3,
        "min": xs[0],
        "max": xs[-1],
        "runs": len(xs),
    }


def fmt(values: Sequence[float], digits: int = 0) -> str:
    """`median (min–max)` of `values`."""
    s = spread(values)
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}–{s['max']:.{digits}f})"


def take_turns(fns: dict[str, Callable[[], T]], runs: int) -> dict[str, list[T]]:
    """Call every function once per run, in turn, rotating who goes first; their results.

    Each function returns what it measured (a time, a rate, a record). Rotating the order
    keeps any effect of going first or after a given neighbour off one function.
    """
    if runs < 1:
        raise ValueError("runs must be at least 1")
    names = list(fns)
    out: dict[str, list[T]] = {name: [] for name in names}
    for r in range(runs):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            out[name].append(fns[name]())
    return out


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while timing a chunk of operations.

    A collection scans every tracked object in the process; when a bench keeps many large
    structures alive at once (every pool size, every policy, interleaved), a collection
    triggered by one of them charges it for all the others. Reference counting still frees
    what each operation drops.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
