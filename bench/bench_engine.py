"""The serving engine on this machine's CPU with the tiny byte-level model.

Prints two tables and writes bench/results/engine.json. Usage:
    python bench/bench_engine.py [--quick]
1. Throughput on a shared-system-prompt workload, every request submitted at once: the paged
   engine with and without prefix caching, against generating each request alone with a
   contiguous KV cache (`generate_contiguous`).
2. One KV budget, short prompts with output lengths that vary (as real ones do) and are not known
   at admission: how many requests run at once and how fast, paged blocks against a contiguous
   reservation of the model's whole context per request (the engine with one block of `CONTEXT`
   tokens per request is exactly that).
Prefill counts include recomputation after preemptions. Every run must give the same greedy
tokens; times are the fastest of 3 runs each.
"""

from __future__ import annotations

import argparse
import random
import time

from results_file import write_results

from paged_kv.course.naive import generate_contiguous
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import TinyLM
from paged_kv.serving.scheduler import SamplingParams

BLOCK = 16
CONTEXT = 256  # the longest sequence the contiguous server must be ready for
BUDGET = 1024  # tokens of KV memory in part 2
REPEATS = 3
SYSTEM = (
    "You are a careful assistant for a small library. Answer questions about opening hours, "
    "loans and the reading room politely and in two sentences.\n"
)
WORDS = ["when", "can", "I", "borrow", "return", "books", "room", "open", "late", "fees"]

Request = tuple[list[int], int]  # prompt, new tokens


def shared_prompt_requests(n: int, new: int, seed: int = 0) -> list[Request]:
    rng = random.Random(seed)
    questions = [" ".join(rng.choices(WORDS, k=rng.randrange(3, 9))) + "?" for _ in range(n)]
    return [(list((SYSTEM + q).encode()), new) for q in questions]


def short_varied_requests(n: int, seed: int = 1) -> list[Request]:
    """Prompts of 10-60 bytes; outputs of 8-128 tokens, most of them short."""
    rng = random.Random(seed)
    requests = []
    for _ in range(n):
        prompt = " ".join(rng.choices(WORDS, k=rng.randrange(2, 12)))[:60]
        requests.append((list(prompt.encode()), min(128, 8 + int(rng.expovariate(1 / 30)))))
    return requests


def timed_best(run) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(REPEATS):
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
    return best, result


def run_engine(model: TinyLM, requests: list[Request], **engine_args) -> dict:
    def serve() -> tuple[Engine, list[int]]:
        engine = Engine(model, **engine_args)
        ids = [engine.add_request(p, SamplingParams(new)) for p, new in requests]
        engine.run()
        return engine, ids

    seconds, (engine, ids) = timed_best(serve)
    stats = engine.stats()
    return {
        "tokens": [engine.completion(i).token_ids for i in ids],
        "seconds": seconds,
        "tokens_per_s": stats.generated_tokens / seconds,
        "peak_running": stats.peak_running,
        "prefill_computed": stats.prefill_tokens_computed,
        "prefill_saved": stats.prefill_tokens_saved,
        "preemptions": len(stats.preemptions),
    }


def run_alone_contiguous(model: TinyLM, requests: list[Request]) -> dict:
    seconds, tokens = timed_best(lambda: [generate_contiguous(model, p, n) for p, n in requests])
    return {
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": sum(n for _, n in requests) / seconds,
        "peak_running": 1,
        "prefill_computed": sum(len(p) for p, _ in requests),
        "prefill_saved": 0,
        "preemptions": 0,
    }


def print_rows(rows: dict[str, dict], baseline: str) -> None:
    print(
        f"{'run':<34} {'tok/s':>7} {'x base':>6} {'running':>7} {'prefill':>8} {'saved':>6} "
        f"{'preempt':>7}"
    )
    for name, r in rows.items():
        ratio = r["tokens_per_s"] / rows[baseline]["tokens_per_s"]
        print(
            f"{name:<34} {r['tokens_per_s']:>7.0f} {ratio:>6.2f} {r['peak_running']:>7} "
            f"{r['prefill_computed']:>8} {r['prefill_saved']:>6} {r['preemptions']:>7}"
        )


def check_same_tokens(rows: dict[str, dict], reference: list[list[int]]) -> None:
    for name, r in rows.items():
        assert r.pop("tokens") == reference, f"{name} generated other tokens"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer, shorter requests")
    args = parser.parse_args()
    n, new = (8, 16) if args.quick else (32, 48)
    model = TinyLM(seed=0)
    run_engine(model, shared_prompt_requests(2, 2), num_blocks=64)  # warm up

    shared = shared_prompt_requests(n, new)
    throughput = {
        "paged, prefix caching": run_engine(model, shared, num_blocks=512),
        "paged, no prefix caching": run_engine(model, shared, num_blocks=512, prefix_caching=False),
        "one at a time, contiguous cache": run_alone_contiguous(model, shared),
    }
    varied = short_varied_requests(n)
    paged = dict(num_blocks=BUDGET // BLOCK, block_size=BLOCK, max_running=64)
    budget = {
        "paged blocks": run_engine(model, varied, **paged),
        "paged blocks, no prefix caching": run_engine(model, varied, **paged, prefix_caching=False),
        "contiguous reservation": run_engine(
            model, varied, num_blocks=BUDGET // CONTEXT, block_size=CONTEXT, prefix_caching=False
        ),
    }
    check_same_tokens(throughput, throughput["one at a time, contiguous cache"]["tokens"])
    check_same_tokens(budget, run_alone_contiguous(model, varied)["tokens"])

    print(f"{n} requests sharing a system prompt, {new} new tokens each\n")
    print_rows(throughput, "one at a time, contiguous cache")
    outputs = [new for _, new in varied]
    print(
        f"\n{n} short requests, {min(outputs)}-{max(outputs)} new tokens (mean "
        f"{sum(outputs) / n:.0f}); KV budget {BUDGET} tokens; contiguous reserves {CONTEXT}\n"
    )
    print_rows(budget, "contiguous reservation")
    write_results(
        "engine",
        {
            "model": "TinyLM default (byte-level, 2 layers, hidden 64)",
            "requests": n,
            "shared_prompt_new_tokens": new,
            "varied_new_tokens": outputs,
            "kv_budget_tokens": BUDGET,
            "contiguous_reservation_tokens": CONTEXT,
            "block_size": BLOCK,
            "quick": args.quick,
            "throughput": throughput,
            "one_budget": budget,
        },
    )


if __name__ == "__main__":
    main()
