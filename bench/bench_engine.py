"""The serving engine on this machine's CPU with the tiny byte-level model.

Prints two tables; writes bench/results/engine.json only with --save. Usage:
    python bench/bench_engine.py [--quick] [--threads N] [--save]
1. Throughput on a shared-system-prompt workload, every request submitted at once: the paged
   engine with and without prefix caching, against generating each request alone with a
   contiguous KV cache (`generate_contiguous`).
2. One KV budget, short prompts with output lengths that vary (as real ones do) and are not known
   at admission: how many requests run at once and how fast, paged blocks against a contiguous
   reservation of the model's whole context per request (the engine with one block of `CONTEXT`
   tokens per request is exactly that).
Prefill counts include recomputation after preemptions. Every run must give the same greedy
tokens. All six runs of a repeat take turns (who goes first rotates), 5 repeats, with torch's
threads pinned (`--threads`, 1 by default); tokens/s is the median with its min–max, and
"x base" the median of the per-repeat ratios to the baseline.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from measure import MIN_RUNS, pin_threads, spread, take_turns
from results_file import add_save_flag, save_or_say

from paged_kv.course.naive import generate_contiguous
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import TinyLM
from paged_kv.serving.scheduler import SamplingParams

BLOCK = 16
CONTEXT = 256  # the longest sequence the contiguous server must be ready for
BUDGET = 1024  # tokens of KV memory in part 2
REPEATS = MIN_RUNS
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


Run = dict  # one timed run: tokens, seconds, tokens_per_s and the engine's counts


def engine_runner(model: TinyLM, requests: list[Request], **engine_args) -> Callable[[], Run]:
    def serve() -> Run:
        start = time.perf_counter()
        engine = Engine(model, **engine_args)
        ids = [engine.add_request(p, SamplingParams(new)) for p, new in requests]
        engine.run()
        seconds = time.perf_counter() - start
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

    return serve


def alone_contiguous_runner(model: TinyLM, requests: list[Request]) -> Callable[[], Run]:
    def serve() -> Run:
        start = time.perf_counter()
        tokens = [generate_contiguous(model, p, n) for p, n in requests]
        seconds = time.perf_counter() - start
        return {
            "tokens": tokens,
            "seconds": seconds,
            "tokens_per_s": sum(n for _, n in requests) / seconds,
            "peak_running": 1,
            "prefill_computed": sum(len(p) for p, _ in requests),
            "prefill_saved": 0,
            "preemptions": 0,
        }

    return serve


def summarize(runs: list[Run]) -> dict:
    """One row from the repeats of a run: its counts (identical every time) and rate spread."""
    first = runs[0]
    for r in runs[1:]:
        for key in ("tokens", "peak_running", "prefill_computed", "prefill_saved", "preemptions"):
            assert r[key] == first[key], f"{key} differs between repeats of one run"
    rate = spread([r["tokens_per_s"] for r in runs])
    return {
        **first,
        "seconds": spread([r["seconds"] for r in runs])["median"],
        "tokens_per_s": rate["median"],
        "tokens_per_s_spread": [rate["min"], rate["max"]],
        "tokens_per_s_runs": [r["tokens_per_s"] for r in runs],
    }


def print_rows(rows: dict[str, dict], baseline: str) -> None:
    print(
        f"{'run':<34} {'tok/s (min–max)':>20} {'x base (min–max)':>18} {'running':>7} "
        f"{'prefill':>8} {'saved':>6} {'preempt':>7}"
    )
    for name, r in rows.items():
        base = rows[baseline]["tokens_per_s_runs"]
        ratios = [a / b for a, b in zip(r["tokens_per_s_runs"], base, strict=True)]
        x = spread(ratios)
        r["x_base"] = x["median"]
        r["x_base_spread"] = [x["min"], x["max"]]
        low, high = r["tokens_per_s_spread"]
        print(
            f"{name:<34} {r['tokens_per_s']:>7.0f} ({low:>5.0f}–{high:<5.0f})"
            f" {x['median']:>5.2f} ({x['min']:.2f}–{x['max']:.2f}) {r['peak_running']:>7} "
            f"{r['prefill_computed']:>8} {r['prefill_saved']:>6} {r['preemptions']:>7}"
        )


def check_same_tokens(rows: dict[str, dict], reference: list[list[int]]) -> None:
    for name, r in rows.items():
        assert r.pop("tokens") == reference, f"{name} generated other tokens"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer, shorter requests")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    add_save_flag(parser, "engine")
    args = parser.parse_args()
    threads = pin_threads(args.threads)
    n, new = (8, 16) if args.quick else (32, 48)
    model = TinyLM(seed=0)
    engine_runner(model, shared_prompt_requests(2, 2), num_blocks=64)()  # warm up

    shared = shared_prompt_requests(n, new)
    varied = short_varied_requests(n)
    paged = dict(num_blocks=BUDGET // BLOCK, block_size=BLOCK, max_running=64)
    throughput_runners = {
        "paged, prefix caching": engine_runner(model, shared, num_blocks=512),
        "paged, no prefix caching": engine_runner(
            model, shared, num_blocks=512, prefix_caching=False
        ),
        "one at a time, contiguous cache": alone_contiguous_runner(model, shared),
    }
    budget_runners = {
        "paged blocks": engine_runner(model, varied, **paged),
        "paged blocks, no prefix caching": engine_runner(
            model, varied, **paged, prefix_caching=False
        ),
        "contiguous reservation": engine_runner(
            model, varied, num_blocks=BUDGET // CONTEXT, block_size=CONTEXT, prefix_caching=False
        ),
    }
    # Every run of both tables takes turns with the others, repeat by repeat.
    runs = take_turns({**throughput_runners, **budget_runners}, REPEATS)
    throughput = {name: summarize(runs[name]) for name in throughput_runners}
    budget = {name: summarize(runs[name]) for name in budget_runners}
    check_same_tokens(throughput, throughput["one at a time, contiguous cache"]["tokens"])
    check_same_tokens(budget, alone_contiguous_runner(model, varied)()["tokens"])

    print(f"{n} requests sharing a system prompt, {new} new tokens each; {REPEATS} repeats\n")
    print_rows(throughput, "one at a time, contiguous cache")
    outputs = [new for _, new in varied]
    print(
        f"\n{n} short requests, {min(outputs)}-{max(outputs)} new tokens (mean "
        f"{sum(outputs) / n:.0f}); KV budget {BUDGET} tokens; contiguous reserves {CONTEXT}\n"
    )
    print_rows(budget, "contiguous reservation")
    save_or_say(
        args.save,
        "engine",
        {
            "model": "TinyLM default (byte-level, 2 layers, hidden 64)",
            "unit": f"tokens/s: median of {REPEATS} repeats taken in turn, with min–max",
            "torch_threads": threads,
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
