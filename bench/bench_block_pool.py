"""Block pool and manager throughput as the pool grows, against the naive scanning pool.

Prints a table and writes bench/results/block_pool.json. Usage:
    python bench/bench_block_pool.py [--quick]
Every pool is built once, half full; timed chunks of operations then run in rounds that
interleave the pool sizes, and each figure is the fastest chunk (least disturbed by the machine).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from results_file import write_results

from paged_kv import BlockPool, KVCacheManager
from paged_kv.course.checks import count_lines_executed
from paged_kv.course.naive import ScanBlockPool

SIZES = [1_000, 10_000, 100_000, 1_000_000]
ROUNDS = 7


def churn(pool, seed: int = 0) -> Callable[[int], float]:
    """A timer of allocate(1) + release of a random held block, on a half-full `pool`."""
    held = pool.allocate(pool.num_blocks // 2)
    rng = random.Random(seed)

    def run(ops: int) -> float:
        picks = [rng.randrange(len(held)) for _ in range(ops)]
        start = time.perf_counter_ns()
        for i in picks:
            [new] = pool.allocate(1)
            pool.release([held[i]])
            held[i] = new
        return (time.perf_counter_ns() - start) / ops

    return run


def appends(num_blocks: int, block_size: int = 16, num_seqs: int = 100) -> Callable[[int], float]:
    """A timer of append_tokens(one token), round robin over sequences filling half the pool."""
    manager = KVCacheManager(num_blocks, block_size)
    prompt = [0] * (num_blocks // 2 // num_seqs * block_size)
    for s in range(num_seqs):
        manager.add_sequence(s, prompt)

    def run(ops: int) -> float:
        order = [i % num_seqs for i in range(ops)]
        token = [1]
        start = time.perf_counter_ns()
        for s in order:
            manager.append_tokens(s, token)
        return (time.perf_counter_ns() - start) / ops

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer operations (smoke run)")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    columns: dict[str, tuple[Callable[[int], Callable[[int], float]], Callable[[int], int]]] = {
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
    best = {key: float("inf") for key in timers}
    for _ in range(ROUNDS):
        for (col, n), run in timers.items():
            best[col, n] = min(best[col, n], run(columns[col][1](n)))

    rows = []
    for n in SIZES:
        row = {"num_blocks": n, **{col: round(best[col, n], 1) for col in columns}}
        row["naive_over_fifo"] = round(row["naive_scan_ns"] / row["fifo_ns"], 1)
        # Work, not time: Python lines per allocate + release (identical at every size = O(1)).
        timer = churn(BlockPool(n))
        row["fifo_lines_per_op"] = count_lines_executed(lambda t=timer: t(100)) / 100
        rows.append(row)
        print(
            f"{n:>9,} blocks  fifo {row['fifo_ns']:>6.0f} ns"
            f"  pack_pages {row['pack_pages_ns']:>6.0f} ns"
            f"  naive {row['naive_scan_ns']:>12,.0f} ns ({row['naive_over_fifo']:>7,.0f}×)"
            f"  append {row['append_ns']:>5.0f} ns  lines/op {row['fifo_lines_per_op']:.1f}",
            flush=True,
        )
    flat = {
        c: round(rows[-1][c] / rows[0][c], 2) for c in ("fifo_ns", "pack_pages_ns", "append_ns")
    }
    print("\ncost at 10⁶ blocks / cost at 10³ blocks:", flat)
    write_results(
        "block_pool",
        {
            "unit": "ns per operation, fastest of 7 interleaved chunks",
            "operation": {
                "fifo_ns, pack_pages_ns, naive_scan_ns": "allocate(1) + release(1), half-full pool",
                "append_ns": "append_tokens of one token, 100 sequences, half-full pool",
                "fifo_lines_per_op": "Python lines run per allocate + release, harness included",
            },
            "quick": args.quick,
            "rows": rows,
            "cost_ratio_1e6_over_1e3": flat,
        },
    )


if __name__ == "__main__":
    main()
