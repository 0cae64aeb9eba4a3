"""Eviction policies: cost per operation as the cache grows, and hit rate against Belady.

Prints two tables; writes bench/results/eviction.json only with --save (with --part, the other
part's saved figures are kept). Usage:
    python bench/bench_eviction.py [--quick] [--save] [--part cost|hits]
Every policy of `POLICIES` is measured: LRU, LFU, aging LFU, FIFO, LFU with history
(cache/history_lfu.py), and the modern S3-FIFO, W-TinyLFU and ARC (cache/s3fifo.py, tinylfu.py,
arc.py). --quick is a smoke run (10³–10⁴ blocks, fewer operations, 500-request traces); its
figures are not the ones to quote.
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
Hits: every policy on each workload (seeds 0 and 1) at 100, 200 and 400 blocks, as a share of
Belady's (offline optimum), beside the online limit (study/online_limit.py: A0's rule on what the
trace's past reveals to an observer who knows the generator's rules, not its draws) and the A0
oracle (study/oracle.py: told the generator's state, which no policy knows). Where the online
limit stays under 90% of Belady, no online policy can be expected to reach it; above it, the gap
is what a policy fails to learn. At 100 blocks, both are also given over eight seeds.
"""

from __future__ import annotations

import argparse
import random
import time
from itertools import count

import numpy as np
from measure import MIN_RUNS, gc_paused, pin_threads, spread
from results_file import add_save_flag, merge_saved_parts, save_or_say

from paged_kv.cache.eviction import POLICIES, make_policy
from paged_kv.course.naive import HeapLFU
from paged_kv.study.online_limit import online_limit_hits
from paged_kv.study.oracle import oracle_hits
from paged_kv.study.trace_replay import (
    belady_hits,
    perfect_lfu_hits,
    replay_trace,
    serve_requests,
)
from paged_kv.study.workloads import RATED_WORKLOADS, RatedTrace

SIZES = [1_000, 10_000, 100_000, 1_000_000]
QUICK_SIZES = [1_000, 10_000]
CAPACITIES = [100, 200, 400]
GOAL = 0.9  # issue 16: the best online policy reaches 90% of Belady's hits
SEEDS = (0, 1)  # a second seed: a conclusion must not hang on one draw of the traces
SPREAD_SEEDS = range(8)  # at the smallest cache, where the goal meets the online limit
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


def cost_table(scale: int, sizes: list[int]) -> list[dict]:
    subjects = {(name, n): Subject(name, n) for name in NAMES for n in sizes}
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
    """Hit rates (deterministic: one run each) as shares of Belady's, per workload and seed.

    Beside the real policies: the online limit (`online_limit_hits`: A0's rule on what the
    trace's past reveals, the most an online policy can expect), the A0 oracle (`oracle_hits`:
    told the generator's state, more than any policy knows) and perfect LFU (exact counts)."""
    rows = []
    for workload, make in RATED_WORKLOADS.items():
        for seed in SEEDS:
            rated = make(num_requests=500, seed=seed) if quick else make(seed=seed)
            for capacity in capacities:
                rows.append(hit_rate_cell(workload, seed, rated, capacity))
    return rows


def hit_rate_cell(workload: str, seed: int, rated: RatedTrace, capacity: int) -> dict:
    """Every policy and reference on one trace and cache size."""
    trace = rated.keys
    bound = belady_hits(trace, capacity).hits
    hits = {p: replay_trace(trace, capacity, p).hits for p in POLICIES}
    best = max(hits, key=hits.get)
    served = {p: serve_requests(trace, rated.request_starts, capacity, p).hits for p in POLICIES}
    best_served = max(served, key=served.get)
    limit = online_limit_hits(rated, capacity).hits
    oracle = oracle_hits(rated, capacity).hits
    return {
        "workload": workload,
        "seed": seed,
        "capacity": capacity,
        "accesses": len(trace),
        "belady_hit_rate": bound / len(trace),
        "oracle_hit_rate": oracle / len(trace),
        "hit_rate": {p: h / len(trace) for p, h in hits.items()},
        "share_of_belady": {p: h / bound for p, h in hits.items()},
        "best_online": best,
        "best_over_belady": hits[best] / bound,
        "served_share_of_belady": {p: h / bound for p, h in served.items()},
        "best_served": best_served,
        "best_served_over_belady": served[best_served] / bound,
        "online_limit_over_belady": limit / bound,
        "best_over_online_limit": hits[best] / limit,
        "oracle_over_belady": oracle / bound,
        "perfect_lfu_over_belady": perfect_lfu_hits(trace, capacity).hits / bound,
    }


def spread_table(quick: bool) -> list[dict]:
    """At the smallest cache, over SPREAD_SEEDS: the online limit and the best real policy.

    One seed's cell can land either side of 90% by the luck of its draws; this says where the
    goal sits against what an online policy can expect."""
    rows = []
    for workload, make in RATED_WORKLOADS.items():
        cells = [
            hit_rate_cell(
                workload,
                seed,
                make(num_requests=500, seed=seed) if quick else make(seed=seed),
                CAPACITIES[0],
            )
            for seed in SPREAD_SEEDS
        ]
        row = {"workload": workload, "capacity": CAPACITIES[0], "seeds": list(SPREAD_SEEDS)}
        for key in ("online_limit_over_belady", "best_over_belady"):
            sp = spread([c[key] for c in cells])
            row[key] = {k: round(v, 4) for k, v in sp.items() if k in ("median", "min", "max")}
        row["best_online"] = sorted({c["best_online"] for c in cells})
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer operations (smoke run)")
    parser.add_argument("--part", choices=["cost", "hits", "all"], default="all")
    add_save_flag(parser, "eviction")
    args = parser.parse_args()
    threads = pin_threads(1)  # pure Python; pinned as in every bench
    scale = 10 if args.quick else 1
    sizes = QUICK_SIZES if args.quick else SIZES
    payload: dict = {"torch_threads": threads, "quick": args.quick}
    if args.part in ("cost", "all"):
        payload.update(print_cost(scale, sizes))
    if args.part in ("hits", "all"):
        payload.update(print_hit_rates(args.quick))
    if args.part != "all" and not args.quick:
        payload = merge_saved_parts("eviction", payload)
    save_or_say(args.save, "eviction", payload)


def print_cost(scale: int, sizes: list[int]) -> dict:
    cost = cost_table(scale, sizes)

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
        flat[name] = {k: round(by_size[sizes[-1]][k] / by_size[sizes[0]][k], 2) for k in KINDS}
    print(f"\nmedian cost at {sizes[-1]:,} / at {sizes[0]:,} blocks:")
    for name, ratios in flat.items():
        print(f"  {name:16} " + "  ".join(f"{k[:-3]} {v:.2f}" for k, v in ratios.items()))
    return {
        "cost_unit": (
            f"ns per operation, median of {ROUNDS} interleaved chunks, with min–max; hit = "
            "revive + touch + make_evictable, miss = evict + touch + make_evictable; the "
            "dict floor does the same deletes and inserts on a plain dict"
        ),
        "cost": cost,
        f"cost_ratio_{sizes[-1]}_over_{sizes[0]}": flat,
    }


def print_hit_rates(quick: bool) -> dict:
    rates = hit_rate_table(CAPACITIES, quick)
    names = list(POLICIES)
    print(
        "\nhits as a share of Belady's (offline optimum), per policy; limit = the online limit "
        "(A0's rule on what the past reveals: the most an online policy can expect); oracle = A0, "
        "told the generator's state; perfect LFU = exact counts of all the past; best served = "
        "the best policy when each request holds its blocks while it runs and releases them "
        "last first, as the manager does (serve_requests)\n"
        f"{'workload':20} {'seed':>4} {'cap':>4} {'belady':>7} "
        + " ".join(f"{p:>9}" for p in names)
        + f"  {'best':>18} {'limit':>6} {'oracle':>7} {'perfect-lfu':>11} {'best served':>18}"
    )
    for r in rates:
        share = r["share_of_belady"]
        mark = "" if r["best_over_belady"] >= GOAL else "  < 90%"
        if r["online_limit_over_belady"] < GOAL:
            mark += ", so is the online limit"
        print(
            f"{r['workload']:20} {r['seed']:>4} {r['capacity']:>4} {r['belady_hit_rate']:>7.3f} "
            + " ".join(f"{share[p]:>9.1%}" for p in names)
            + f"  {r['best_over_belady']:>6.1%} {r['best_online']:>11}"
            + f" {r['online_limit_over_belady']:>6.1%} {r['oracle_over_belady']:>7.1%}"
            + f" {r['perfect_lfu_over_belady']:>11.1%}"
            + f" {r['best_served_over_belady']:>6.1%} {r['best_served']:>11}{mark}"
        )
    for seed in SEEDS:
        cells = [r for r in rates if r["seed"] == seed]
        met = sum(r["best_over_belady"] >= GOAL for r in cells)
        reachable = sum(r["online_limit_over_belady"] >= GOAL for r in cells)
        close = sum(r["best_over_online_limit"] >= 0.98 for r in cells)
        print(
            f"seed {seed}: best real policy at >= {GOAL:.0%} of Belady in {met} of {len(cells)} "
            f"cells; the online limit in {reachable}; the best real policy within 2% of the "
            f"online limit in {close}"
        )
    spread_rows = spread_table(quick)
    print(
        f"\nat {CAPACITIES[0]} blocks, seeds {SPREAD_SEEDS[0]}–{SPREAD_SEEDS[-1]}: median (min–max)"
    )
    for r in spread_rows:
        lim, best = r["online_limit_over_belady"], r["best_over_belady"]
        print(
            f"  {r['workload']:20} online limit {lim['median']:.1%} ({lim['min']:.1%}–"
            f"{lim['max']:.1%})  best real policy {best['median']:.1%} ({best['min']:.1%}–"
            f"{best['max']:.1%}) [{', '.join(r['best_online'])}]"
        )
    return {"hit_rates": rates, "smallest_cache_over_seeds": spread_rows}


if __name__ == "__main__":
    main()
