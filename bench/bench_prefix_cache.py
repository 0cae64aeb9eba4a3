"""Prefix caching: cost of adding a sequence per prompt token, hashing cost, prefill saved.

Prints tables; writes bench/results/prefix_cache.json only with --save. Usage:
    python bench/bench_prefix_cache.py [--quick] [--save]
Cost: `add_sequence` + `free_sequence` of a prompt of L tokens on a pool of N blocks (half of
it in use by others), either a miss (fresh tokens: hash, allocate, register) or a full hit
(the same prompt again: hash, look up, share). One manager per (pool, length); each repeat
visits all of them in turn, a miss then its hit, with the garbage collector paused; each
figure is the median of the repeats (at least 5), with their min–max.
"""

from __future__ import annotations

import argparse
import random
import time

from measure import MIN_RUNS, gc_paused, pin_threads, spread
from results_file import add_save_flag, save_or_say

from paged_kv import KVCacheManager
from paged_kv.cache.eviction import POLICIES
from paged_kv.cache.hashing import block_hashes
from paged_kv.study.trace_replay import replay_requests
from paged_kv.study.workloads import chat_sessions

PROMPTS = [128, 512, 2048, 8192]
POOLS = [10_000, 100_000, 1_000_000]
BLOCK = 16


class AddCost:
    """A manager of `pool_blocks` blocks, half held by others, and a timer of add + free."""

    def __init__(self, pool_blocks: int, prompt_len: int, seed: int = 0) -> None:
        self.manager = KVCacheManager(pool_blocks, BLOCK)
        self.manager.pool.allocate(pool_blocks // 2)  # other requests hold half the pool
        self.prompt_len = prompt_len
        self.rng = random.Random(seed)
        self.repeat = 0

    def miss_and_hit_ns(self) -> tuple[float, float]:
        """ns per prompt token of add + free of a fresh prompt, then of the same one again."""
        prompt = [self.rng.randrange(32_000) for _ in range(self.prompt_len)]
        manager, r = self.manager, self.repeat
        self.repeat += 1
        before = manager.hit_rates().hit_tokens
        with gc_paused():
            start = time.perf_counter_ns()
            manager.add_sequence(("miss", r), prompt)
            manager.free_sequence(("miss", r))
            miss = time.perf_counter_ns() - start
            start = time.perf_counter_ns()
            manager.add_sequence(("hit", r), prompt)
            manager.free_sequence(("hit", r))
            hit = time.perf_counter_ns() - start
        hit_tokens = manager.hit_rates().hit_tokens - before
        assert hit_tokens == (self.prompt_len - 1) // BLOCK * BLOCK, "the hit did not hit"
        return miss / self.prompt_len, hit / self.prompt_len


def hashing_ns_per_token(prompt_len: int) -> float:
    tokens = list(range(prompt_len))
    with gc_paused():
        start = time.perf_counter_ns()
        block_hashes(tokens, BLOCK)
        return (time.perf_counter_ns() - start) / prompt_len


def cell(values: list[float]) -> str:
    s = spread(values)
    return f"{s['median']:.0f} ({s['min']:.0f}–{s['max']:.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats (smoke run)")
    add_save_flag(parser, "prefix_cache")
    args = parser.parse_args()
    threads = pin_threads(1)  # pure Python; pinned as in every bench
    repeats = MIN_RUNS if args.quick else 7

    subjects = {(pool, length): AddCost(pool, length) for pool in POOLS for length in PROMPTS}
    misses: dict[tuple[int, int], list[float]] = {key: [] for key in subjects}
    hits: dict[tuple[int, int], list[float]] = {key: [] for key in subjects}
    hashing: dict[int, list[float]] = {n: [] for n in PROMPTS}
    for _ in range(repeats):  # every pool and length in turn, then the next repeat
        for key, subject in subjects.items():
            miss, hit = subject.miss_and_hit_ns()
            misses[key].append(miss)
            hits[key].append(hit)
        for n in PROMPTS:
            hashing[n].append(hashing_ns_per_token(n))

    cost = []
    print(f"ns per prompt token, median of {repeats} repeats (min–max)")
    print(f"{'pool blocks':>12} {'prompt':>7} {'miss':>18} {'hit':>18}")
    for (pool, length), values in misses.items():
        m, h = spread(values), spread(hits[pool, length])
        cost.append(
            {
                "pool_blocks": pool,
                "prompt_tokens": length,
                "miss_ns_per_token": round(m["median"], 1),
                "miss_spread_ns": [round(m["min"], 1), round(m["max"], 1)],
                "hit_ns_per_token": round(h["median"], 1),
                "hit_spread_ns": [round(h["min"], 1), round(h["max"], 1)],
            }
        )
        print(f"{pool:>12,} {length:>7,} {cell(values):>18} {cell(hits[pool, length]):>18}")
    hashing_median = {n: round(spread(v)["median"], 1) for n, v in hashing.items()}
    print(
        "\nSHA-256 block hashing, ns per token, median (min–max):",
        ", ".join(f"{n}: {cell(v)}" for n, v in hashing.items()),
    )
    by = {(r["pool_blocks"], r["prompt_tokens"]): r for r in cost}
    flat = {
        f"{length} tokens": round(
            by[POOLS[-1], length]["miss_ns_per_token"] / by[POOLS[0], length]["miss_ns_per_token"],
            2,
        )
        for length in PROMPTS
    }
    print("median miss cost at 10⁶ blocks / at 10⁴ blocks:", flat)

    workloads = {
        "shared system prompt (1 turn)": chat_sessions(300, turns=1, seed=0),
        "multi-turn chat (3 turns)": chat_sessions(120, turns=3, seed=0),
    }
    saved = []
    print(f"\n{'workload':32} {'blocks':>6} " + " ".join(f"{p:>9}" for p in POLICIES))
    for name, requests in workloads.items():
        for blocks in (100, 200, 800):
            row = {
                p: replay_requests(requests, num_blocks=blocks, block_size=BLOCK, eviction=p).saved
                for p in POLICIES
            }
            saved.append({"workload": name, "pool_blocks": blocks, **row})
            print(f"{name:32} {blocks:>6} " + " ".join(f"{row[p]:>9.1%}" for p in POLICIES))

    save_or_say(
        args.save,
        "prefix_cache",
        {
            "cost_unit": f"ns per prompt token, median of {repeats} interleaved repeats",
            "torch_threads": threads,
            "quick": args.quick,
            "add_sequence_cost": cost,
            "miss_cost_ratio_1e6_over_1e4": flat,
            "hashing_ns_per_token": hashing_median,
            "prefill_tokens_saved": saved,
        },
    )


if __name__ == "__main__":
    main()
