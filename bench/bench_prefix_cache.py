"""Prefix caching: the hash chain against the radix tree, prefill saved, cache-aware scheduling.

Prints tables; writes bench/results/prefix_cache.json only with --save. Usage:
    python bench/bench_prefix_cache.py [--quick] [--save] [--part cost|memory|saved|schedule]
(with --part, the other parts' saved figures are kept).

Cost: `add_sequence` + `free_sequence` of a prompt of L tokens on a pool of N blocks (half of
it in use by others), for each prefix index (`hash`: chained SHA-256 block hashes, vLLM;
`radix`: a radix tree of token runs, SGLang): a *miss* (fresh tokens: hash or walk, allocate,
index), a *hit* (the same prompt again: look up, share) and a *lookup* (pricing a new request
with those tokens, as a scheduler does: a fresh `TokenSequence`, so the hash chain hashes it).
One manager per (index, pool, length); each repeat visits all of them in turn, with the garbage
collector paused; each figure is the median of the repeats (at least 5), with their min–max.
Block size 1 (token granularity) gets its own lookup table. Memory: bytes held by each index per
cached token (tracemalloc, the index alone). Scheduling: the engine on shared-prompt traffic,
first come first served against longest prefix first, runs taken in turn.
"""

from __future__ import annotations

import argparse
import gc
import random
import time
import tracemalloc

from measure import MIN_RUNS, gc_paused, pin_threads, spread, take_turns
from results_file import add_save_flag, merge_saved_parts, save_or_say

from paged_kv import KVCacheManager
from paged_kv.cache.eviction import POLICIES
from paged_kv.cache.hashing import block_hashes
from paged_kv.cache.prefix_cache import PrefixCache
from paged_kv.cache.radix_cache import RadixCache
from paged_kv.cache.sequence import TokenSequence
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import ModelConfig, TinyLM
from paged_kv.serving.scheduler import SamplingParams
from paged_kv.study.token_chats import chat_sessions
from paged_kv.study.trace_replay import replay_requests

PROMPTS = [128, 512, 2048, 8192]
POOLS = [10_000, 100_000, 1_000_000]
INDEXES = ("hash", "radix")
BLOCK = 16


class AddCost:
    """A manager of `pool_blocks` blocks, half held by others, and timers of add + free."""

    def __init__(self, index: str, pool_blocks: int, prompt_len: int, block_size: int = BLOCK):
        self.manager = KVCacheManager(pool_blocks, block_size, prefix_index=index)
        self.manager.pool.allocate(pool_blocks // 2)  # other requests hold half the pool
        self.prompt_len, self.block_size = prompt_len, block_size
        self.rng = random.Random(prompt_len)
        self.repeat = 0

    def miss_hit_lookup_ns(self) -> tuple[float, float, float]:
        """ns per prompt token: add + free of a fresh prompt, of the same again, and pricing a
        new request with those tokens."""
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
            start = time.perf_counter_ns()
            priced = manager.num_prefix_hit_tokens(TokenSequence(prompt))
            lookup = time.perf_counter_ns() - start
        expected = (self.prompt_len - 1) // self.block_size * self.block_size
        assert manager.hit_rates().hit_tokens - before == priced == expected, "no full hit"
        return miss / self.prompt_len, hit / self.prompt_len, lookup / self.prompt_len


def hashing_ns_per_token(prompt_len: int) -> float:
    tokens = list(range(prompt_len))
    with gc_paused():
        start = time.perf_counter_ns()
        block_hashes(tokens, BLOCK)
        return (time.perf_counter_ns() - start) / prompt_len


def cell(values: list[float]) -> str:
    s = spread(values)
    return f"{s['median']:.0f} ({s['min']:.0f}–{s['max']:.0f})"


def cost_tables(quick: bool) -> dict:
    repeats = MIN_RUNS if quick else 7
    pools = POOLS[:1] if quick else POOLS
    prompts = PROMPTS[:3] if quick else PROMPTS
    subjects = {
        (index, pool, length): AddCost(index, pool, length)
        for pool in pools
        for length in prompts
        for index in INDEXES
    }
    token_level = {  # block size 1: every token a block (the radix tree's token granularity)
        (index, length): AddCost(index, 100_000, length, block_size=1)
        for length in prompts[:3]
        for index in INDEXES
    }
    timings: dict[tuple, list[tuple[float, float, float]]] = {k: [] for k in subjects}
    token_timings: dict[tuple, list[tuple[float, float, float]]] = {k: [] for k in token_level}
    hashing: dict[int, list[float]] = {n: [] for n in prompts}
    for _ in range(repeats):  # everything in turn, then the next repeat
        for key, subject in subjects.items():
            timings[key].append(subject.miss_hit_lookup_ns())
        for key, subject in token_level.items():
            token_timings[key].append(subject.miss_hit_lookup_ns())
        for n in prompts:
            hashing[n].append(hashing_ns_per_token(n))

    cost = []
    print(f"ns per prompt token, block size {BLOCK}, median of {repeats} repeats (min–max)")
    print(
        f"{'pool blocks':>12} {'prompt':>7} {'index':>6} {'miss (add+free)':>18} "
        f"{'hit (add+free)':>18} {'lookup (pricing)':>18}"
    )
    for (index, pool, length), values in timings.items():
        miss, hit, lookup = (list(v) for v in zip(*values, strict=True))
        row = {"index": index, "pool_blocks": pool, "prompt_tokens": length}
        for name, v in (("miss", miss), ("hit", hit), ("lookup", lookup)):
            s = spread(v)
            row[f"{name}_ns_per_token"] = round(s["median"], 1)
            row[f"{name}_spread_ns"] = [round(s["min"], 1), round(s["max"], 1)]
        cost.append(row)
        print(
            f"{pool:>12,} {length:>7,} {index:>6} {cell(miss):>18} {cell(hit):>18} "
            f"{cell(lookup):>18}"
        )
    token_rows = []
    print("\nblock size 1 (token granularity), pool of 100,000 blocks: ns per prompt token")
    print(f"{'prompt':>7} {'index':>6} {'miss (add+free)':>18} {'lookup (pricing)':>18}")
    for (index, length), values in token_timings.items():
        miss, _, lookup = (list(v) for v in zip(*values, strict=True))
        token_rows.append(
            {"index": index, "prompt_tokens": length, "block_size": 1,
             "miss_ns_per_token": round(spread(miss)["median"], 1),
             "lookup_ns_per_token": round(spread(lookup)["median"], 1)}
        )  # fmt: skip
        print(f"{length:>7,} {index:>6} {cell(miss):>18} {cell(lookup):>18}")
    hashing_median = {n: round(spread(v)["median"], 1) for n, v in hashing.items()}
    print(
        "\nSHA-256 block hashing alone, ns per token, median (min–max):",
        ", ".join(f"{n}: {cell(v)}" for n, v in hashing.items()),
    )
    by = {(r["index"], r["pool_blocks"], r["prompt_tokens"]): r for r in cost}
    flat = {
        f"{index} {length} tokens": round(
            by[index, pools[-1], length]["miss_ns_per_token"]
            / by[index, pools[0], length]["miss_ns_per_token"],
            2,
        )
        for index in INDEXES
        for length in prompts
    }
    print(f"median miss cost at {pools[-1]:,} blocks / at {pools[0]:,} blocks:", flat)
    return {
        "cost_unit": f"ns per prompt token, median of {repeats} interleaved repeats",
        "add_sequence_cost": cost,
        "token_granularity_cost": token_rows,
        f"miss_cost_ratio_{pools[-1]}_over_{pools[0]}": flat,
        "hashing_ns_per_token": hashing_median,
    }


def index_bytes_per_token(index: str, block_size: int, num_prompts: int, length: int) -> float:
    """Bytes the index alone holds per cached token, after caching `num_prompts` distinct
    prompts of `length` tokens (token ids above 256, so every id is an int object of its own,
    as in a real vocabulary)."""
    rng = random.Random(0)
    gc.collect()
    tracemalloc.start()
    cache = PrefixCache(block_size) if index == "hash" else RadixCache(block_size)
    before = tracemalloc.get_traced_memory()[0]
    next_block = 0
    for _ in range(num_prompts):
        seq = TokenSequence([rng.randrange(257, 32_000) for _ in range(length)])
        full = length // block_size
        table = list(range(next_block, next_block + full))
        next_block += full
        _, path = cache.register_blocks(seq, table, 0, full, None)
        cache.release_path(path)
        del seq, table
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return held / (len(cache) * block_size)


def memory_table(quick: bool) -> list[dict]:
    rows = []
    print("\nbytes held by the index per cached token (tracemalloc; the index alone)")
    print(f"{'block size':>10} {'index':>6} {'bytes/token':>12}")
    for block_size in (16, 1):
        for index in INDEXES:
            num_prompts = 20 if quick else 100
            per_token = index_bytes_per_token(index, block_size, num_prompts, 512)
            rows.append({"index": index, "block_size": block_size, "bytes_per_token": per_token})
            print(f"{block_size:>10} {index:>6} {per_token:>12.1f}")
    return rows


def prefill_saved_table(quick: bool) -> list[dict]:
    sessions = (100, 40) if quick else (300, 120)
    workloads = {
        "shared system prompt (1 turn)": chat_sessions(sessions[0], turns=1, seed=0),
        "multi-turn chat (3 turns)": chat_sessions(sessions[1], turns=3, seed=0),
    }
    saved = []
    print(
        "\nshare of prompt tokens not recomputed, per eviction policy (block size 16)\n"
        f"{'workload':32} {'blocks':>6} " + " ".join(f"{p:>9}" for p in POLICIES)
    )
    for name, requests in workloads.items():
        for blocks in (100, 200, 800):
            row = {
                p: replay_requests(requests, num_blocks=blocks, block_size=BLOCK, eviction=p).saved
                for p in POLICIES
            }
            saved.append({"workload": name, "pool_blocks": blocks, **row})
            print(f"{name:32} {blocks:>6} " + " ".join(f"{row[p]:>9.1%}" for p in POLICIES))
    return saved


def serve(
    model: TinyLM,
    prompts: list[list[int]],
    schedule: str,
    max_overtaken: int,
    *,
    num_blocks: int,
    arrivals_per_step: int,
    new_tokens: int,
) -> dict:
    """Serve `prompts` arriving `arrivals_per_step` per step; what it cost and who waited."""
    engine = Engine(
        model, num_blocks=num_blocks, block_size=BLOCK, max_batch_tokens=512, max_running=8,
        schedule=schedule,
    )  # fmt: skip
    engine.scheduler.max_overtaken = max_overtaken
    pending, arrived, waits, step = list(prompts), {}, {}, 0
    began = time.perf_counter()
    while pending or engine.has_unfinished():
        for _ in range(arrivals_per_step):
            if pending:
                rid = engine.add_request(pending.pop(0), SamplingParams(new_tokens))
                arrived[rid] = (step, time.perf_counter())
        if engine.has_unfinished():
            plan = engine.step()
            now = time.perf_counter()
            for chunk in plan.chunks:
                rid = chunk.request.request_id
                if chunk.admitted and rid not in waits:
                    waits[rid] = (step - arrived[rid][0], now - arrived[rid][1])
        step += 1
    stats = engine.stats()
    return {
        "steps": stats.steps,
        "prefill_tokens_computed": stats.prefill_tokens_computed,
        "prefill_tokens_saved": stats.prefill_tokens_saved,
        "prefix_hit_rate": round(stats.hit_rate, 4),
        "preemptions": stats.num_preemptions,
        "worst_wait_steps": max(w for w, _ in waits.values()),
        "mean_wait_steps": round(sum(w for w, _ in waits.values()) / len(waits), 2),
        "worst_wait_s": max(s for _, s in waits.values()),
        "tokens_per_s": stats.tokens_per_s,
        "wall_s": time.perf_counter() - began,
    }


def scheduling_table(quick: bool) -> list[dict]:
    """FCFS against longest prefix first on shared-prompt traffic that outruns the server."""
    model = TinyLM(ModelConfig())  # the toy model: steps cost mostly scheduling and the cache
    to_bytes = lambda requests: [[t % 256 for t in p] for p, _ in requests]  # noqa: E731
    n = 32 if quick else 64
    workloads = {
        "8 system prompts, 1 turn": to_bytes(
            chat_sessions(n, turns=1, num_system_prompts=8, system_tokens=256, user_tokens=32)
        ),
        "6 system prompts, 3 turns": to_bytes(
            chat_sessions(n // 2, turns=3, num_system_prompts=6, system_tokens=256, user_tokens=32)
        ),
    }
    settings = [("fcfs", 0)] + [("longest_prefix", m) for m in ((8,) if quick else (2, 8, 32))]
    rows = []
    print(
        "\ncache-aware scheduling: 4 arrivals per step, 80 blocks of 16, at most 8 running, "
        f"4 new tokens each; medians of {MIN_RUNS} runs in turn (min–max)\n"
        f"{'workload':26} {'schedule':>20} {'computed':>9} {'saved':>7} {'hit':>6} "
        f"{'worst wait':>10} {'mean':>6} {'steps':>5} {'tokens/s':>18} {'worst wait s':>18}"
    )
    for name, prompts in workloads.items():
        runs = take_turns(
            {
                (schedule, m): (
                    lambda s=schedule, m=m, p=prompts: serve(
                        model, p, s, m, num_blocks=80, arrivals_per_step=4, new_tokens=4
                    )
                )
                for schedule, m in settings
            },
            MIN_RUNS,
        )
        for (schedule, m), results in runs.items():
            first = results[0]
            for key in ("prefill_tokens_saved", "worst_wait_steps", "steps"):
                assert all(r[key] == first[key] for r in results), "counts differ between runs"
            rate = [r["tokens_per_s"] for r in results]
            worst = [r["worst_wait_s"] for r in results]
            label = "fcfs" if schedule == "fcfs" else f"longest_prefix ({m})"
            rows.append(
                {"workload": name, "schedule": schedule, "max_overtaken": m,
                 **{k: v for k, v in first.items() if k not in ("tokens_per_s", "wall_s",
                                                                  "worst_wait_s")},
                 "tokens_per_s": spread(rate), "worst_wait_s": spread(worst)}
            )  # fmt: skip
            print(
                f"{name:26} {label:>20} {first['prefill_tokens_computed']:>9} "
                f"{first['prefill_tokens_saved']:>7} {first['prefix_hit_rate']:>6.1%} "
                f"{first['worst_wait_steps']:>10} {first['mean_wait_steps']:>6.1f} "
                f"{first['steps']:>5} {cell(rate):>18} {fmt_s(worst):>18}"
            )
    return rows


def fmt_s(values: list[float]) -> str:
    s = spread(values)
    return f"{s['median']:.2f} ({s['min']:.2f}–{s['max']:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer sizes and requests (smoke)")
    parser.add_argument(
        "--part", choices=["cost", "memory", "saved", "schedule", "all"], default="all"
    )
    add_save_flag(parser, "prefix_cache")
    args = parser.parse_args()
    threads = pin_threads(1)  # pure Python and a toy model; pinned as in every bench
    payload: dict = {"torch_threads": threads, "quick": args.quick}
    if args.part in ("cost", "all"):
        payload.update(cost_tables(args.quick))
    if args.part in ("memory", "all"):
        payload["index_bytes_per_cached_token"] = memory_table(args.quick)
    if args.part in ("saved", "all"):
        payload["prefill_tokens_saved"] = prefill_saved_table(args.quick)
    if args.part in ("schedule", "all"):
        payload["scheduling"] = scheduling_table(args.quick)
    if args.part != "all" and not args.quick:
        payload = merge_saved_parts("prefix_cache", payload)
    save_or_say(args.save, "prefix_cache", payload)


if __name__ == "__main__":
    main()
