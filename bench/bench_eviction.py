"""Eviction policies: cost per operation as the cache grows, and hit rate against Belady.

Prints two tables; writes bench/results/eviction.json only with --save. Usage:
    python bench/bench_eviction.py [--quick] [--save]
Cost: every policy holds N cached blocks. A *hit* is what the pool does on a prefix hit and the
release that follows: `revive` (the block leaves the candidates), `touch`, `make_evictable`
(a candidate again). That is real work for every policy, FIFO included (a bare `touch` is a
no-op for FIFO, and timing it measured nothing). Hits go to cached blocks drawn uniformly (the
worst case for the memory hierarchy) or Zipf-skewed (popular blocks, as in the workloads); the
keys are drawn from the blocks actually cached at that moment. A *miss* evicts the victim and
brings a new block in (`evict`, `touch`, `make_evictable`). The floor is a plain dict doing the
same dictionary work (a hit deletes and re-inserts its key, a miss deletes the oldest key and
inserts the new one; which key is oldest is worked out before the clock starts). Timed chunks
run in rounds that interleave every policy, the floor and the seed-style heap LFU at every size,
with the garbage collector paused (a collection would scan every subject's objects); each figure
is the median of the chunks, with their min–max.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from itertools import count

import numpy as np
from measure import MIN_RUNS, gc_paused, pin_threads, spread
from results_file import add_save_flag, save_or_say

from paged_kv.cache.eviction import POLICIES, make_policy
from paged_kv.course.naive import HeapLFU
from paged_kv.study.trace_replay import belady_hits, replay_trace
from paged_kv.study.workloads import WORKLOADS

SIZES = [1_000, 10_000, 100_000, 1_000_000]
FLOOR = "dict (floor)"
NAMES = [*POLICIES, "heap-lfu (seed)", FLOOR]
ROUNDS = 5
assert ROUNDS >= MIN_RUNS
KINDS = ("hit_ns", "miss_ns", "zipf_hit_ns")


class Subject:
    """One policy (or the plain-dict floor) holding `size` cached blocks, with timers."""

    def __init__(self, name: str, size: int, seed: int = 0) -> None:
        self.floor = name == FLOOR
        if self.floor:
            self.table: dict[int, None] = dict.fromkeys(range(size))
        else:
            self.policy = HeapLFU() if name.startswith("heap") else make_policy(name)
            for b in range(size):
                self.policy.touch(b)
                self.policy.make_evictable(b)
        self.size = size
        self.cached = list(range(size))  # the keys cached now, refreshed after misses
        self.fresh = count(size)
        self.rng = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)
        self.ops = 0

    def __contains__(self, key: int) -> bool:
        return key in self.table if self.floor else key in self.policy

    def hits_ns(self, ops: int, skewed: bool = False) -> float:
        """Hits on cached blocks drawn uniformly (worst case for memory) or Zipf-skewed."""
        cached = self.cached
        if skewed:  # rank r is drawn with probability ~ 1 / r^1.2, as popular prefixes are
            ranks = [r for r in self.np_rng.zipf(1.2, ops * 2) if r <= len(cached)]
            while len(ranks) < ops:
                ranks += [r for r in self.np_rng.zipf(1.2, ops) if r <= len(cached)]
            keys = [cached[r - 1] for r in ranks[:ops]]
        else:
            keys = [cached[self.rng.randrange(len(cached))] for _ in range(ops)]
        if self.floor:
            remove, insert = self.table.__delitem__, self.table.__setitem__
            with gc_paused():
                start = time.perf_counter_ns()
                for k in keys:
                    remove(k)
                    insert(k, None)
                elapsed = time.perf_counter_ns() - start
        else:
            policy = self.policy
            revive, touch, make_evictable = policy.revive, policy.touch, policy.make_evictable
            with gc_paused():
                start = time.perf_counter_ns()
                for k in keys:
                    revive(k)
                    touch(k)
                    make_evictable(k)
                elapsed = time.perf_counter_ns() - start
        self.ops += ops
        return elapsed / ops

    def misses_ns(self, ops: int) -> float:
        new = [next(self.fresh) for _ in range(ops)]
        if self.floor:  # oldest first: what is cached now in insertion order, then the new
            victims = [*self.table, *new][:ops]
            remove, insert = self.table.__delitem__, self.table.__setitem__
            with gc_paused():
                start = time.perf_counter_ns()
                for old, k in zip(victims, new, strict=True):
                    remove(old)
                    insert(k, None)
                elapsed = time.perf_counter_ns() - start
        else:
            policy = self.policy
            evict, touch, make_evictable = policy.evict, policy.touch, policy.make_evictable
            with gc_paused():
                start = time.perf_counter_ns()
                for k in new:
                    evict()
                    touch(k)
                    make_evictable(k)
                elapsed = time.perf_counter_ns() - start
        self.cached = [k for k in (*self.cached, *new) if k in self]
        assert len(self.cached) == self.size
        self.ops += ops
        return elapsed / ops


def cost_table(scale: int) -> list[dict]:
    subjects = {(name, n): Subject(name, n) for name in NAMES for n in SIZES}
    chunks = {key: {kind: [] for kind in KINDS} for key in subjects}
    for _ in range(ROUNDS):
        for key, subject in subjects.items():
            chunks[key]["hit_ns"].append(subject.hits_ns(20_000 // scale))
            chunks[key]["miss_ns"].append(subject.misses_ns(20_000 // scale))
            chunks[key]["zipf_hit_ns"].append(subject.hits_ns(20_000 // scale, skewed=True))
    rows = []
    for (name, n), by_kind in chunks.items():
        s = subjects[name, n]
        heap = len(s.policy.heap) if not s.floor and isinstance(s.policy, HeapLFU) else None
        row = {"policy": name, "cached_blocks": n, "ops_done": s.ops, "heap_entries": heap}
        for kind, values in by_kind.items():
            sp = spread(values)
            row[kind] = round(sp["median"], 1)
            row[kind.replace("_ns", "_spread_ns")] = [round(sp["min"], 1), round(sp["max"], 1)]
        rows.append(row)
    return rows


def hit_rate_table(capacities: list[int], quick: bool) -> list[dict]:
    rows = []
    for workload, make in WORKLOADS.items():
        trace = make(num_requests=500) if quick else make()
        for capacity in capacities:
            bound = belady_hits(trace, capacity).hit_rate
            rates = {p: replay_trace(trace, capacity, p).hit_rate for p in POLICIES}
            best = max(rates, key=rates.get)
            rows.append(
                {"workload": workload, "capacity": capacity, **rates, "belady": bound,
                 "best_online": best, "best_over_belady": rates[best] / bound if bound else 0.0}
            )  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer operations (smoke run)")
    add_save_flag(parser, "eviction")
    args = parser.parse_args()
    threads = pin_threads(1)  # pure Python; pinned as in every bench
    scale = 10 if args.quick else 1

    cost = cost_table(scale)

    def cell(r: dict, kind: str) -> str:
        low, high = r[kind.replace("_ns", "_spread_ns")]
        return f"{r[kind]:.0f} ({low:.0f}–{high:.0f})"

    print(
        f"ns per operation, median of {ROUNDS} interleaved chunks (min–max)\n"
        f"{'policy':16} {'cached':>10} {'hit':>17} {'zipf hit':>17} {'miss':>17}"
        "  heap entries / cached"
    )
    for r in cost:
        heap = f"{r['heap_entries'] / r['cached_blocks']:.1f}" if r["heap_entries"] else ""
        print(
            f"{r['policy']:16} {r['cached_blocks']:>10,} {cell(r, 'hit_ns'):>17}"
            f" {cell(r, 'zipf_hit_ns'):>17} {cell(r, 'miss_ns'):>17}  {heap}"
        )
    flat = {}
    for name in NAMES:
        by_size = {r["cached_blocks"]: r for r in cost if r["policy"] == name}
        flat[name] = {k: round(by_size[SIZES[-1]][k] / by_size[SIZES[0]][k], 2) for k in KINDS}
    print("\nmedian cost at 10⁶ / at 10³:", json.dumps(flat))

    rates = hit_rate_table([100, 200, 400], args.quick)
    print(
        f"\n{'workload':20} {'cap':>4} "
        + " ".join(f"{p:>9}" for p in POLICIES)
        + "    belady  best/bel"
    )
    for r in rates:
        print(
            f"{r['workload']:20} {r['capacity']:>4} "
            + " ".join(f"{r[p]:>9.3f}" for p in POLICIES)
            + f"  {r['belady']:>8.3f}  {r['best_over_belady']:>7.1%} ({r['best_online']})"
        )
    save_or_say(
        args.save,
        "eviction",
        {
            "cost_unit": (
                f"ns per operation, median of {ROUNDS} interleaved chunks, with min–max; hit = "
                "revive + touch + make_evictable, miss = evict + touch + make_evictable; the "
                "dict floor does the same deletes and inserts on a plain dict"
            ),
            "torch_threads": threads,
            "quick": args.quick,
            "cost": cost,
            "cost_ratio_1e6_over_1e3": flat,
            "hit_rates": rates,
        },
    )


if __name__ == "__main__":
    main()
