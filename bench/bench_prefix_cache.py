"""Prefix caching: cost of adding a sequence per prompt token, hashing cost, prefill saved.

Prints tables and writes bench/results/prefix_cache.json. Usage:
    python bench/bench_prefix_cache.py [--quick]
Cost: `add_sequence` of a prompt of L tokens on a pool of N blocks (half of it in use by
others), either a miss (fresh tokens: hash, allocate, register) or a full hit (the same
prompt again: hash, look up, share). Each figure is the fastest of several repeats.
"""

from __future__ import annotations

import argparse
import random
import time

from results_file import write_results

from paged_kv import KVCacheManager
from paged_kv.cache.eviction import POLICIES
from paged_kv.cache.hashing import block_hashes
from paged_kv.study.trace_replay import replay_requests
from paged_kv.study.workloads import chat_sessions

PROMPTS = [128, 512, 2048, 8192]
POOLS = [10_000, 100_000, 1_000_000]
BLOCK = 16


def add_cost_ns_per_token(pool_blocks: int, prompt_len: int, repeats: int) -> tuple[float, float]:
    """(miss, hit) ns per prompt token of add_sequence + free_sequence."""
    manager = KVCacheManager(pool_blocks, BLOCK)
    manager.pool.allocate(pool_blocks // 2)  # other requests hold half the pool
    rng = random.Random(0)
    best_miss = best_hit = float("inf")
    for r in range(repeats):
        prompt = [rng.randrange(32_000) for _ in range(prompt_len)]
        start = time.perf_counter_ns()
        manager.add_sequence(("miss", r), prompt)
        manager.free_sequence(("miss", r))
        best_miss = min(best_miss, time.perf_counter_ns() - start)
        start = time.perf_counter_ns()
        manager.add_sequence(("hit", r), prompt)
        manager.free_sequence(("hit", r))
        best_hit = min(best_hit, time.perf_counter_ns() - start)
        assert manager.hit_rates().window_hit_tokens  # the hit really hit
    return best_miss / prompt_len, best_hit / prompt_len


def hashing_ns_per_token(prompt_len: int, repeats: int) -> float:
    tokens = list(range(prompt_len))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter_ns()
        block_hashes(tokens, BLOCK)
        best = min(best, time.perf_counter_ns() - start)
    return best / prompt_len


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats (smoke run)")
    args = parser.parse_args()
    repeats = 3 if args.quick else 7

    cost = []
    print(f"{'pool blocks':>12} {'prompt':>7} {'miss ns/token':>14} {'hit ns/token':>13}")
    for pool in POOLS:
        for length in PROMPTS:
            miss, hit = add_cost_ns_per_token(pool, length, repeats)
            cost.append(
                {
                    "pool_blocks": pool,
                    "prompt_tokens": length,
                    "miss_ns_per_token": round(miss, 1),
                    "hit_ns_per_token": round(hit, 1),
                }
            )
            print(f"{pool:>12,} {length:>7,} {miss:>14.0f} {hit:>13.0f}")
    hashing = {n: round(hashing_ns_per_token(n, repeats), 1) for n in PROMPTS}
    print("\nSHA-256 block hashing, ns per token:", hashing)
    by = {(r["pool_blocks"], r["prompt_tokens"]): r for r in cost}
    flat = {
        f"{length} tokens": round(
            by[POOLS[-1], length]["miss_ns_per_token"] / by[POOLS[0], length]["miss_ns_per_token"],
            2,
        )
        for length in PROMPTS
    }
    print("miss cost at 10⁶ blocks / at 10⁴ blocks:", flat)

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

    write_results(
        "prefix_cache",
        {
            "quick": args.quick,
            "add_sequence_cost": cost,
            "miss_cost_ratio_1e6_over_1e4": flat,
            "hashing_ns_per_token": hashing,
            "prefill_tokens_saved": saved,
        },
    )


if __name__ == "__main__":
    main()
