"""The serving engine on this machine's CPU with the tiny byte-level model.

Prints two tables and writes bench/results/engine.json. Usage:
    python bench/bench_engine.py [--quick]
Workload: requests that share a system prompt, each with its own question, greedy decoding.
1. Throughput, every request submitted at once: the paged engine with and without prefix
   caching, against generating each request alone with a contiguous KV cache.
2. One KV budget: how many requests run at once and how fast, paged blocks against a
   contiguous reservation of the model's whole context per request (the engine with one
   block of `context` tokens per request is exactly that). All runs must give the same tokens.
"""

from __future__ import annotations

import argparse
import random
import time

from results_file import write_results

from paged_kv.course.naive import generate_contiguous
from paged_kv.engine import Engine
from paged_kv.model import TinyLM

BLOCK = 16
CONTEXT = 256  # the longest sequence the contiguous server must be ready for
SYSTEM = (
    "You are a careful assistant for a small library. Answer questions about opening hours, "
    "loans and the reading room politely and in two sentences.\n"
)


def workload(num_requests: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    words = ["when", "can", "I", "borrow", "return", "books", "room", "open", "late", "fees"]
    questions = [
        " ".join(rng.choices(words, k=rng.randrange(3, 9))) + "?" for _ in range(num_requests)
    ]
    return [list((SYSTEM + q).encode()) for q in questions]


def run_engine(model: TinyLM, prompts: list[list[int]], new: int, **engine_args) -> dict:
    engine = Engine(model, **engine_args)
    start = time.perf_counter()
    out = engine.generate(prompts, new)
    seconds = time.perf_counter() - start
    stats = engine.stats()
    return {
        "tokens": [c.token_ids for c in out],
        "seconds": seconds,
        "tokens_per_s": stats.generated_tokens / seconds,
        "peak_running": stats.peak_running,
        "prefill_computed": stats.prefill_tokens_computed,
        "prefill_saved": stats.prefill_tokens_saved,
        "preemptions": len(stats.preemptions),
    }


def run_alone_contiguous(model: TinyLM, prompts: list[list[int]], new: int) -> dict:
    start = time.perf_counter()
    tokens = [generate_contiguous(model, p, new) for p in prompts]
    seconds = time.perf_counter() - start
    computed = sum(map(len, prompts))
    return {
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": len(prompts) * new / seconds,
        "peak_running": 1,
        "prefill_computed": computed,
        "prefill_saved": 0,
        "preemptions": 0,
    }


def print_rows(rows: dict[str, dict], baseline: str) -> None:
    print(f"{'run':<34} {'tok/s':>7} {'x base':>6} {'running':>7} {'prefill':>8} {'saved':>6}")
    for name, r in rows.items():
        ratio = r["tokens_per_s"] / rows[baseline]["tokens_per_s"]
        print(
            f"{name:<34} {r['tokens_per_s']:>7.1f} {ratio:>6.2f} {r['peak_running']:>7} "
            f"{r['prefill_computed']:>8} {r['prefill_saved']:>6}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer, shorter requests")
    args = parser.parse_args()
    num_requests, new = (8, 16) if args.quick else (32, 48)
    budget_tokens = 1024
    model = TinyLM(seed=0)
    prompts = workload(num_requests)
    run_engine(model, prompts[:2], 2, num_blocks=64)  # warm up

    throughput = {
        "paged, prefix caching": run_engine(model, prompts, new, num_blocks=512),
        "paged, no prefix caching": run_engine(
            model, prompts, new, num_blocks=512, prefix_caching=False
        ),
        "one at a time, contiguous cache": run_alone_contiguous(model, prompts, new),
    }
    budget = {
        "paged blocks": run_engine(
            model, prompts, new, num_blocks=budget_tokens // BLOCK, max_running=64
        ),
        "contiguous reservation": run_engine(
            model,
            prompts,
            new,
            num_blocks=budget_tokens // CONTEXT,
            block_size=CONTEXT,
            prefix_caching=False,
        ),
    }
    expected = throughput["one at a time, contiguous cache"]["tokens"]
    for name, r in {**throughput, **budget}.items():
        assert r.pop("tokens") == expected, f"{name} generated other tokens"

    print(f"{num_requests} requests, {new} new tokens each, shared system prompt\n")
    print_rows(throughput, "one at a time, contiguous cache")
    print(f"\nKV budget of {budget_tokens} tokens; contiguous reserves {CONTEXT} per request\n")
    print_rows(budget, "contiguous reservation")
    write_results(
        "engine",
        {
            "model": "TinyLM default (byte-level, 2 layers, hidden 64)",
            "requests": num_requests,
            "new_tokens": new,
            "kv_budget_tokens": budget_tokens,
            "contiguous_reservation_tokens": CONTEXT,
            "block_size": BLOCK,
            "quick": args.quick,
            "throughput": throughput,
            "one_budget": budget,
        },
    )


if __name__ == "__main__":
    main()
