"""Block pool and manager throughput as the pool grows, against the naive scanning pool.

Prints a table; writes bench/results/block_pool.json only with --save. Usage:
    python bench/bench_block_pool.py [--quick] [--save]
Every pool is built once and filled to half before timing: the pools by allocating half their
blocks, the manager by adding 100 sequences of distinct tokens (the same prompt everywhere would
be shared by prefix caching and leave most of the pool free); the script prints the measured
in-use fraction. Timed chunks of operations then run in rounds that interleave all columns and
sizes (the naive pool beside the ones it is compared to), with the garbage collector paused (a
collection would scan every pool alive), and each figure is the median of the 7 chunks, with
their min–max.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from measure import MIN_RUNS, gc_paused, pin_threads, spread
from results_file import add_save_flag, save_or_say

from paged_kv import BlockPool, KVCacheManager
from paged_kv.course.checks import count_lines_executed
from paged_kv.course.naive import ScanBlockPool

SIZES = [1_000, 10_000, 100_000, 1_000_000]
ROUNDS = 7
NUM_SEQS = 100
assert ROUNDS >= MIN_RUNS


class Timer:
    """`run(ops)` times `ops` operations (ns per operation); `in_use()` is the pool's load."""

    run: Callable[[int], float]
    in_use: Callable[[], float]


def churn(pool, seed: int = 0) -> Timer:
    """A timer of allocate(1) + release of a random held block, on a half-full `pool`."""
    held = pool.allocate(pool.num_blocks // 2)
    rng = random.Random(seed)
    timer = Timer()

    def run(ops: int) -> float:
        picks = [rng.randrange(len(held)) for _ in range(ops)]
        with gc_paused():
            start = time.perf_counter_ns()
            for i in picks:
                [new] = pool.allocate(1)
                pool.release([held[i]])
                held[i] = new
            return (time.perf_counter_ns() - start) / ops

    timer.run = run
    timer.in_use = lambda: 1 - pool.num_free / pool.num_blocks
    return timer


def appends(num_blocks: int, block_size: int = 16) -> Timer:
    """A timer of append_tokens(one token), round robin over sequences filling half the pool.

    Each prompt starts with its own token, so its chained block hashes differ from every
    other prompt's from the first block on: nothing is shared and the pool is really half
    full (prefix caching stays on, as in the manager's default use).
    """
    manager = KVCacheManager(num_blocks, block_size)
    length = num_blocks // 2 // NUM_SEQS * block_size
    filler = [0] * (length - 1)
    for s in range(NUM_SEQS):
        manager.add_sequence(s, [s + 1, *filler])
    timer = Timer()

    def run(ops: int) -> float:
        order = [i % NUM_SEQS for i in range(ops)]
        token = [1]
        with gc_paused():
            start = time.perf_counter_ns()
            for s in order:
                manager.append_tokens(s, token)
            return (time.perf_counter_ns() - start) / ops

    timer.run = run
    timer.in_use = lambda: manager.pool.num_in_use / num_blocks
    return timer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer operations (smoke run)")
    add_save_flag(parser, "block_pool")
    args = parser.parse_args()
    threads = pin_threads(1)  # pure Python; pinned as in every bench
    scale = 10 if args.quick else 1
    columns: dict[str, tuple[Callable[[int], Timer], Callable[[int], int]]] = {
        "fifo_ns": (lambda n: churn(BlockPool(n)), lambda n: 20_000 // scale),
        "pack_pages_ns": (
            lambda n: churn(BlockPool(n, blocks_per_page=8, allocation="pack_pages")),
            lambda n: 20_000 // scale,
        ),
        "naive_scan_ns": (
            lambda n: churn(ScanBlockPool(n)),
            lambda n: max(3, 500_000 // n // scale),
        ),
        # Appends never run the pool dry: all rounds together fill at most the free half.
        "append_ns": (appends, lambda n: min(20_000, n // 2 * 16 // (ROUNDS + 1)) // scale),
    }
    timers = {(col, n): make(n) for col, (make, _) in columns.items() for n in SIZES}
    loaded = {key: t.in_use() for key, t in timers.items()}
    print("in use before timing:", ", ".join(
        f"{col[:-3]} {min(v for (c, _), v in loaded.items() if c == col):.1%}"
        f"–{max(v for (c, _), v in loaded.items() if c == col):.1%}" for col in columns
    ))  # fmt: skip
    chunks: dict[tuple[str, int], list[float]] = {key: [] for key in timers}
    for _ in range(ROUNDS):
        for (col, n), timer in timers.items():
            chunks[col, n].append(timer.run(columns[col][1](n)))

    rows = []
    for n in SIZES:
        row: dict = {"num_blocks": n}
        for col in columns:
            s = spread(chunks[col, n])
            row[col] = round(s["median"], 1)
            row[col.replace("_ns", "_spread_ns")] = [round(s["min"], 1), round(s["max"], 1)]
        row["naive_over_fifo"] = round(row["naive_scan_ns"] / row["fifo_ns"], 1)
        row["in_use_fraction"] = {col[:-3]: round(loaded[col, n], 4) for col in columns}
        row["append_in_use_after"] = round(timers["append_ns", n].in_use(), 4)
        # Work, not time: Python lines per allocate + release (identical at every size = O(1)).
        timer = churn(BlockPool(n))
        row["fifo_lines_per_op"] = count_lines_executed(lambda t=timer: t.run(100)) / 100
        rows.append(row)
        cell = {
            col: f"{row[col]:.0f} ({row[col.replace('_ns', '_spread_ns')][0]:.0f}–"
            f"{row[col.replace('_ns', '_spread_ns')][1]:.0f})"
            for col in columns
        }
        print(
            f"{n:>9,} blocks  fifo {cell['fifo_ns']:>14} ns  pack_pages {cell['pack_pages_ns']:>14}"
            f" ns  naive {cell['naive_scan_ns']:>27} ns ({row['naive_over_fifo']:>7,.0f}×)"
            f"  append {cell['append_ns']:>14} ns  lines/op {row['fifo_lines_per_op']:.1f}"
            f"  (append pool {row['in_use_fraction']['append']:.1%} → "
            f"{row['append_in_use_after']:.1%} in use)",
            flush=True,
        )
    flat = {
        c: round(rows[-1][c] / rows[0][c], 2) for c in ("fifo_ns", "pack_pages_ns", "append_ns")
    }
    print("\nmedian cost at 10⁶ blocks / at 10³ blocks:", flat)
    save_or_say(
        args.save,
        "block_pool",
        {
            "unit": f"ns per operation: median of {ROUNDS} interleaved chunks, with min–max",
            "operation": {
                "fifo_ns, pack_pages_ns, naive_scan_ns": "allocate(1) + release(1), half-full pool",
                "append_ns": (
                    f"append_tokens of one token, {NUM_SEQS} sequences of distinct tokens "
                    "(prefix caching on, nothing shared), pool half full"
                ),
                "fifo_lines_per_op": "Python lines run per allocate + release, harness included",
            },
            "torch_threads": threads,
            "quick": args.quick,
            "rows": rows,
            "cost_ratio_1e6_over_1e3": flat,
        },
    )


if __name__ == "__main__":
    main()
