"""Eviction policies: cost per operation as the cache grows, and hit rate against Belady.

Prints two tables and writes bench/results/eviction.json. Usage:
    python bench/bench_eviction.py [--quick]
Cost: every policy holds N cached blocks; a *hit* touches a cached block drawn uniformly (the
worst case for the memory hierarchy) or Zipf-skewed (popular blocks, as in the workloads); a
*miss* evicts the victim and brings a new block in. Timed chunks run in rounds that interleave the
sizes; each figure is the fastest chunk. The seed-style heap LFU runs beside them, with the
size its heap has grown to.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from itertools import count

import numpy as np
from results_file import write_results

from paged_kv.cache.eviction import POLICIES, make_policy
from paged_kv.course.naive import HeapLFU
from paged_kv.study.trace_replay import belady_hits, replay_trace
from paged_kv.study.workloads import WORKLOADS

SIZES = [1_000, 10_000, 100_000, 1_000_000]
NAMES = [*POLICIES, "heap-lfu (seed)"]
ROUNDS = 5


class Subject:
    """One policy holding `size` cached blocks, with timers for hits and misses."""

    def __init__(self, name: str, size: int, seed: int = 0) -> None:
        self.policy = HeapLFU() if name.startswith("heap") else make_policy(name)
        self.size = size
        self.fresh = count(size)
        self.rng = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)
        for b in range(size):
            self.policy.touch(b)
            self.policy.make_evictable(b)
        self.ops = 0

    def hits_ns(self, ops: int, skewed: bool = False) -> float:
        """Hits on cached blocks drawn uniformly (worst case for memory) or Zipf-skewed."""
        if skewed:  # rank r is drawn with probability ~ 1 / r^1.2, as popular prefixes are
            draws = (int(r) - 1 + self.size for r in self.np_rng.zipf(1.2, ops * 3))
        else:
            draws = (self.rng.randrange(self.size * 4) for _ in range(ops * 3))
        keys = [k for k in draws if k in self.policy][:ops]
        touch = self.policy.touch
        start = time.perf_counter_ns()
        for k in keys:
            touch(k)
        self.ops += len(keys)
        return (time.perf_counter_ns() - start) / max(len(keys), 1)

    def misses_ns(self, ops: int) -> float:
        new = [next(self.fresh) for _ in range(ops)]
        policy = self.policy
        start = time.perf_counter_ns()
        for k in new:
            policy.evict()
            policy.touch(k)
            policy.make_evictable(k)
        self.ops += ops
        return (time.perf_counter_ns() - start) / ops


def dict_baseline_ns(size: int, ops: int, rounds: int = ROUNDS) -> float:
    """ns per lookup of a random key in a dict of `size` keys: the machine's memory floor."""
    table = dict.fromkeys(range(size))
    rng = random.Random(0)
    best = float("inf")
    for _ in range(rounds):
        keys = [rng.randrange(size) for _ in range(ops)]
        get = table.__getitem__
        start = time.perf_counter_ns()
        for k in keys:
            get(k)
        best = min(best, (time.perf_counter_ns() - start) / ops)
    return best


def cost_table(scale: int) -> list[dict]:
    subjects = {(name, n): Subject(name, n) for name in NAMES for n in SIZES}
    best = {key: [float("inf")] * 3 for key in subjects}
    for _ in range(ROUNDS):
        for key, subject in subjects.items():
            best[key][0] = min(best[key][0], subject.hits_ns(20_000 // scale))
            best[key][1] = min(best[key][1], subject.misses_ns(20_000 // scale))
            best[key][2] = min(best[key][2], subject.hits_ns(20_000 // scale, skewed=True))
    rows = []
    for (name, n), (hit, miss, skewed_hit) in best.items():
        s = subjects[name, n]
        heap = len(s.policy.heap) if isinstance(s.policy, HeapLFU) else None
        rows.append(
            {"policy": name, "cached_blocks": n, "hit_ns": round(hit, 1),
             "zipf_hit_ns": round(skewed_hit, 1), "miss_ns": round(miss, 1), "ops_done": s.ops,
             "heap_entries": heap}
        )  # fmt: skip
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
    args = parser.parse_args()
    scale = 10 if args.quick else 1

    cost = cost_table(scale)
    print(
        f"{'policy':16} {'cached':>10} {'hit ns':>8} {'zipf hit':>9} {'miss ns':>8}"
        "  heap entries / cached"
    )
    for r in cost:
        heap = f"{r['heap_entries'] / r['cached_blocks']:.1f}" if r["heap_entries"] else ""
        print(
            f"{r['policy']:16} {r['cached_blocks']:>10,} {r['hit_ns']:>8.0f}"
            f" {r['zipf_hit_ns']:>9.0f} {r['miss_ns']:>8.0f}"
            f"  {heap}"
        )
    baseline = {n: dict_baseline_ns(n, 20_000 // scale) for n in SIZES}
    print(
        "dict lookup (memory floor): "
        + ", ".join(f"{n:,}: {v:.0f} ns" for n, v in baseline.items())
    )
    flat = {
        "dict lookup (baseline)": {"hit_ns": round(baseline[SIZES[-1]] / baseline[SIZES[0]], 2)}
    }
    for name in NAMES:
        by_size = {r["cached_blocks"]: r for r in cost if r["policy"] == name}
        flat[name] = {
            k: round(by_size[SIZES[-1]][k] / by_size[SIZES[0]][k], 2)
            for k in ("hit_ns", "zipf_hit_ns", "miss_ns")
        }
    print("\ncost at 10⁶ / cost at 10³:", json.dumps(flat))

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
    write_results(
        "eviction",
        {
            "cost_unit": "ns per hit (touch) / per miss (evict + insert), fastest chunk",
            "quick": args.quick,
            "cost": cost,
            "dict_lookup_baseline_ns": baseline,
            "cost_ratio_1e6_over_1e3": flat,
            "hit_rates": rates,
        },
    )


if __name__ == "__main__":
    main()
