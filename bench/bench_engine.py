"""The serving engine on this machine's CPU with the tiny byte-level model.

Prints four tables; writes bench/results/engine.json only with --save. Usage:
    python bench/bench_engine.py [--quick] [--threads N] [--save]
1. Throughput on a shared-system-prompt workload, every request submitted at once: the paged
   engine with and without prefix caching, against generating each request alone with a
   contiguous KV cache (`generate_contiguous`: the same model run densely, one at a time).
2. One KV budget, short prompts with output lengths that vary (as real ones do) and are not known
   at admission: how many requests run at once and how fast, paged blocks against a contiguous
   reservation of the model's whole context per request (the engine with one block of `CONTEXT`
   tokens per request is exactly that).
3. The peers a user would reach for, on a random `LlamaForCausalLM` of TinyLM's default shape:
   `transformers`' batched greedy `generate` (left-padded, with an attention mask) and, where
   the installed version has it, its own continuous batching on a paged cache,
   `generate_batch` (the same cache as the engine's: 512 pages of 16 tokens, 512 tokens and
   32 requests a step, prefix sharing on; the model's own attention, SDPA), against the engine
   serving the same weights loaded with `from_hf`: same prompts (table 1's), same number of
   new tokens, same threads. All must produce the same tokens (checked, and reported).
4. Where the time goes, for the engine and for `generate` in table 3's workload: each part is
   timed by wrapping it at run time (see `PhaseTimer`; nothing in paged_kv is changed), its
   own time excluding the wrapped parts it calls, so the parts add up to the run.
   (`generate_batch` runs its loop in a thread of its own, so it is not broken down.)
Prefill counts include recomputation after preemptions. Every run must give the same greedy
tokens. All runs of a repeat take turns (who goes first rotates), 5 repeats, with torch's
threads pinned (`--threads`, 1 by default); tokens/s is the median with its min–max, and
"x base" the median of the per-repeat ratios to the baseline.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import random
import time
import types
from collections import defaultdict
from collections.abc import Callable, Iterator

import torch
from measure import MIN_RUNS, pin_threads, spread, take_turns
from results_file import add_save_flag, save_or_say

import paged_kv.serving.model as model_module
from paged_kv.course.naive import generate_contiguous
from paged_kv.serving.engine import Engine
from paged_kv.serving.hf import from_hf
from paged_kv.serving.model import ModelConfig, TinyLM
from paged_kv.serving.scheduler import SamplingParams

BLOCK = 16
CONTEXT = 256  # the longest sequence the contiguous server must be ready for
BUDGET = 1024  # tokens of KV memory in part 2
REPEATS = MIN_RUNS
SYSTEM = (
    "You are a careful assistant for a small library. Answer questions about opening hours, "
    "loans and the reading room politely and in two sentences.\n"
)
HF_BATCH = "transformers generate_batch (paged)"
PAD = 0  # the pad id of transformers' batches (the attention mask says what is padding)
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
            "preemptions": stats.num_preemptions,
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


def engine_generate_runner(
    model: TinyLM, requests: list[Request], timer: PhaseTimer | None = None, **engine_args
) -> Callable[[], Run]:
    """`Engine.generate` on the prompts (table 3); with `timer`, its parts timed (table 4)."""
    prompts = [p for p, _ in requests]
    [new] = {n for _, n in requests}

    def serve() -> Run:
        decode = {}
        if timer is not None:
            timer.reset()
            if "attention" in inspect.signature(Engine).parameters:  # the engine's decode hook
                decode["attention"] = timer.wrap(DECODE, model_module.paged_decode)
        start = time.perf_counter()
        engine = Engine(model, **engine_args, **decode)
        with engine_phases(engine, timer) if timer is not None else contextlib.nullcontext():
            completions = engine.generate(prompts, new)
        seconds = time.perf_counter() - start
        stats = engine.stats()
        return {
            "tokens": [c.token_ids for c in completions],
            "seconds": seconds,
            "tokens_per_s": stats.generated_tokens / seconds,
            "peak_running": stats.peak_running,
            "prefill_computed": stats.prefill_tokens_computed,
            "prefill_saved": stats.prefill_tokens_saved,
            "preemptions": stats.num_preemptions,
            "steps": stats.steps,
            **({"phases": timer.finish(seconds)} if timer is not None else {}),
        }

    return serve


# -- the transformers peer -------------------------------------------------------------------


def hf_llama(seed: int = 0):
    """A random `LlamaForCausalLM` of TinyLM's default shape (None if transformers is absent).

    No BOS/EOS ids: neither side stops early, so both generate exactly the tokens asked for.
    """
    try:
        import transformers
    except ImportError:
        return None
    c = ModelConfig()
    config = transformers.LlamaConfig(
        vocab_size=c.vocab_size,
        hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_layers,
        num_attention_heads=c.num_heads,
        num_key_value_heads=c.num_kv_heads,
        head_dim=c.head_dim,
        rms_norm_eps=c.rms_norm_eps,
        rope_theta=c.rope_theta,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=PAD,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return transformers.LlamaForCausalLM(config).eval()


def left_padded(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts as one batch padded on the left with PAD, and the attention mask (1 = token).
    The mask, not the pad id, says what is padding: a byte prompt may hold any id."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    return ids, mask


def hf_generate_runner(
    hf_model, requests: list[Request], timer: PhaseTimer | None = None
) -> Callable[[], Run]:
    """`generate` of the whole batch, greedy; with `timer`, its parts timed (table 4)."""
    prompts = [p for p, _ in requests]
    [new] = {n for _, n in requests}

    def serve() -> Run:
        if timer is not None:
            timer.reset()
        start = time.perf_counter()
        ids, mask = left_padded(prompts)
        generate = hf_model.generate
        with hf_phases(hf_model, timer) if timer is not None else contextlib.nullcontext():
            if timer is not None:
                generate = timer.wrap("generate loop: inputs, logits, stopping", generate)
            with torch.no_grad():
                out = generate(
                    ids, attention_mask=mask, max_new_tokens=new, do_sample=False, pad_token_id=PAD
                )
        seconds = time.perf_counter() - start
        tokens = out[:, ids.shape[1] :].tolist()
        assert all(len(t) == new for t in tokens), "generate stopped early"
        return {
            "tokens": tokens,
            "seconds": seconds,
            "tokens_per_s": len(prompts) * new / seconds,
            "peak_running": len(prompts),
            "prefill_computed": ids.numel(),  # padding included: generate computes it
            "prefill_saved": 0,
            "preemptions": 0,
            "steps": new,
            **({"phases": timer.finish(seconds)} if timer is not None else {}),
        }

    return serve


def hf_generate_batch_runner(hf_model, requests: list[Request]) -> Callable[[], Run] | None:
    """`generate_batch`, transformers' continuous batching over its paged cache, sized as the
    engine's in table 3 (None if the installed transformers has none). It runs in its own
    thread, so the engine's counts (peak running, prefill) are not observable: shown as -."""
    if not hasattr(hf_model, "generate_batch"):
        return None
    from transformers import ContinuousBatchingConfig, GenerationConfig

    prompts = [p for p, _ in requests]
    [new] = {n for _, n in requests}

    def serve() -> Run:
        start = time.perf_counter()
        out = hf_model.generate_batch(
            prompts,
            generation_config=GenerationConfig(
                do_sample=False, max_new_tokens=new, eos_token_id=-1, pad_token_id=PAD
            ),  # -1: no EOS, as generate_batch itself writes when there is none
            continuous_batching_config=ContinuousBatchingConfig(
                page_size=BLOCK, num_blocks=512, max_batch_tokens=512, max_requests_per_batch=32
            ),  # without sizes it sizes the cache from the free memory: gigabytes on a CPU
            progress_bar=False,
            warmup=False,  # it captures CUDA graphs: nothing to warm on a CPU
        )
        seconds = time.perf_counter() - start
        tokens = [o.generated_tokens for o in out.values()]  # in the prompts' order
        assert len(tokens) == len(prompts) and all(len(t) == new for t in tokens), "cut short"
        return {
            "tokens": tokens,
            "seconds": seconds,
            "tokens_per_s": len(prompts) * new / seconds,
            **dict.fromkeys(("peak_running", "prefill_computed", "prefill_saved"), "-"),
            "preemptions": "-",
        }

    return serve


# -- where the time goes ---------------------------------------------------------------------


class PhaseTimer:
    """Wall time per phase of nested calls, each call's own time only.

    `wrap(phase, fn)` returns `fn` timed: its time minus that of the wrapped calls it makes
    goes to `phase`, so the phases of a run add up to the outermost wrapped call. One clock
    read pair per wrapped call (~0.1 µs) is the cost; the report shows it as the difference
    between instrumented and plain runs.
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._stack = [0.0]  # time spent in wrapped calls, per open call

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()
        self._stack = [0.0]

    def wrap(self, phase: str, fn: Callable) -> Callable:
        seconds, calls, clock = self.seconds, self.calls, time.perf_counter
        seconds[phase] += 0.0  # listed even if never called: a wrap that missed shows as 0

        def timed(*args, **kwargs):
            stack = self._stack
            stack.append(0.0)
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = clock() - start
                seconds[phase] += elapsed - stack.pop()
                calls[phase] += 1
                stack[-1] += elapsed

        return timed

    def finish(self, total_s: float) -> dict[str, float]:
        """The phases' seconds, plus what no wrapped call covered (`OUTSIDE`)."""
        phases = dict(self.seconds)
        phases[OUTSIDE] = total_s - self._stack[0]
        return phases


OUTSIDE = "outside: setup, queueing or padding, loop"
DECODE = "attention: paged_decode"
PHASE_ORDER = (  # how table 4 lists the parts: the model, attention, then the rest
    "model, without attention",
    DECODE,
    "attention: paged_prefill",
    "attention: K/V writes, indexing",
    "attention: sdpa",
    "attention: mask building",
    "attention: KV cache update (DynamicCache)",
    "batch building (ForwardBatch)",
    "scheduling",
    "KV manager",
    "step: sampling, bookkeeping",
    "generate loop: inputs, logits, stopping",
    OUTSIDE,
)
ENGINE_MANAGER_CALLS = (
    "add_sequence",
    "append_tokens",
    "free_sequence",
    "num_prefix_hit_tokens",
    "slot_mapping",
    "block_table",
    "pop_block_copies",
    "stats",
)


@contextlib.contextmanager
def patched(timer: PhaseTimer, targets: list[tuple[object, str, str]]) -> Iterator[None]:
    """Replace each `owner.name` (an object's attribute or a module global) by its timed
    version for `phase`, and put the originals back afterwards."""
    saved = []
    try:
        for owner, name, phase in targets:
            original = getattr(owner, name)  # AttributeError: the engine changed, say so
            had_own = isinstance(owner, type | types.ModuleType) or name in vars(owner)
            saved.append((owner, name, original, had_own))
            setattr(owner, name, timer.wrap(phase, original))
        yield
    finally:
        for owner, name, original, had_own in reversed(saved):
            if had_own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)  # back to the class's method


def engine_phases(engine: Engine, timer: PhaseTimer) -> contextlib.AbstractContextManager:
    """Time an engine's step by part: the model without attention, attention (the paged
    kernels, and the K/V writes and indexing around them), batch building, scheduling, the KV
    manager's calls, and what is left of `step` (sampling, finishing, bookkeeping)."""
    targets = [
        (engine, "step", "step: sampling, bookkeeping"),
        (engine.scheduler, "schedule", "scheduling"),
        (engine.scheduler, "finish", "scheduling"),
        (engine, "_forward_batch", "batch building (ForwardBatch)"),
        (engine.model, "forward", "model, without attention"),
        (model_module, "attend_paged", "attention: K/V writes, indexing"),
        (model_module, "paged_decode", DECODE),  # an engine without the attention= hook
        (model_module, "paged_prefill", "attention: paged_prefill"),
        (engine.kv, "copy_blocks", "attention: K/V writes, indexing"),
    ]
    targets += [(engine.manager, name, "KV manager") for name in ENGINE_MANAGER_CALLS]
    return patched(timer, targets)


@contextlib.contextmanager
def hf_phases(hf_model, timer: PhaseTimer) -> Iterator[None]:
    """Time `generate` by part: the model without attention, attention (the SDPA call, the
    mask building, the KV cache's update), and the rest of generate's loop."""
    from transformers import cache_utils
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.llama import modeling_llama

    implementation = hf_model.config._attn_implementation
    targets = [
        (hf_model, "forward", "model, without attention"),
        (modeling_llama, "create_causal_mask", "attention: mask building"),
        (cache_utils.DynamicLayer, "update", "attention: KV cache update (DynamicCache)"),
    ]
    local = implementation in ALL_ATTENTION_FUNCTIONS._local_mapping
    original = ALL_ATTENTION_FUNCTIONS[implementation]
    ALL_ATTENTION_FUNCTIONS[implementation] = timer.wrap(f"attention: {implementation}", original)
    try:
        with patched(timer, targets):
            yield
    finally:
        if local:
            ALL_ATTENTION_FUNCTIONS[implementation] = original
        else:
            del ALL_ATTENTION_FUNCTIONS[implementation]


def breakdown(runs: list[Run]) -> dict:
    """Median seconds per phase over the instrumented runs, with min–max, and its share of the
    sum of the medians (so that the shares add up to 100%)."""
    steps = runs[0]["steps"]
    seen = {p for r in runs for p in r["phases"]}
    names = [p for p in PHASE_ORDER if p in seen] + sorted(seen - set(PHASE_ORDER))
    medians = {name: spread([r["phases"].get(name, 0.0) for r in runs]) for name in names}
    total = sum(s["median"] for s in medians.values())
    phases = {
        name: {
            "ms": s["median"] * 1e3,
            "ms_spread": [s["min"] * 1e3, s["max"] * 1e3],
            "share": s["median"] / total,
            "us_per_step": s["median"] / steps * 1e6,
        }
        for name, s in medians.items()
    }
    seconds = spread([r["seconds"] for r in runs])["median"]
    return {"seconds": seconds, "steps": steps, "phases": phases}


def print_breakdown(name: str, b: dict, plain_s: float) -> None:
    print(
        f"{name}: {b['seconds'] * 1e3:.0f} ms a run instrumented (plain runs: "
        f"{plain_s * 1e3:.0f} ms), {b['steps']} steps"
    )
    print(f"  {'part':<44} {'ms (min–max)':>20} {'share':>6} {'µs/step':>8}")
    groups = {"the model without attention": 0.0, "attention": 0.0, "everything else": 0.0}
    for phase, v in b["phases"].items():
        low, high = v["ms_spread"]
        print(
            f"  {phase:<44} {v['ms']:>7.1f} ({low:>5.1f}–{high:<5.1f})"
            f" {v['share']:>6.1%} {v['us_per_step']:>8.0f}"
        )
        group = "the model" if phase.startswith("model") else phase.split(":")[0]
        groups[next(g for g in groups if g.startswith(group) or g == "everything else")] += v[
            "share"
        ]
    b["shares"] = groups
    print("  in all: " + ", ".join(f"{g} {share:.0%}" for g, share in groups.items()))


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
    peer_runners: dict[str, Callable[[], Run]] = {}
    timed_runners: dict[str, Callable[[], Run]] = {}
    hf = hf_llama()
    if hf is None:
        print("transformers is not installed: tables 3 and 4 are skipped")
    else:
        import transformers

        hf_weights = from_hf(hf)  # the same weights, in the engine's model
        HF = f"transformers {transformers.__version__} generate"
        peer_runners: dict[str, Callable[[], Run]] = {
            "engine.generate, prefix caching": engine_generate_runner(
                hf_weights, shared, num_blocks=512
            ),
            "engine.generate, no prefix caching": engine_generate_runner(
                hf_weights, shared, num_blocks=512, prefix_caching=False
            ),
            HF: hf_generate_runner(hf, shared),
        }
        continuous = hf_generate_batch_runner(hf, shared)
        warm_up = hf_generate_batch_runner(hf, shared_prompt_requests(2, 2))
        if continuous is None or warm_up is None:
            print(f"transformers {transformers.__version__} has no generate_batch: not compared")
        else:
            peer_runners[HF_BATCH] = continuous
            warm_up()
        timed_runners = {
            "engine.generate, prefix caching": engine_generate_runner(
                hf_weights, shared, PhaseTimer(), num_blocks=512
            ),
            "engine.generate, no prefix caching": engine_generate_runner(
                hf_weights, shared, PhaseTimer(), num_blocks=512, prefix_caching=False
            ),
            HF: hf_generate_runner(hf, shared, PhaseTimer()),
        }
        hf_generate_runner(hf, shared_prompt_requests(2, 2), PhaseTimer())()  # warm up
    # Every run of all tables takes turns with the others, repeat by repeat.
    runs = take_turns(
        {
            **throughput_runners,
            **budget_runners,
            **peer_runners,
            **{f"{name}, timed by part": run for name, run in timed_runners.items()},
        },
        REPEATS,
    )
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

    peer: dict = {}
    if peer_runners:
        rows = {name: summarize(runs[name]) for name in peer_runners}
        engine_tokens = rows["engine.generate, prefix caching"]["tokens"]
        for name in timed_runners:
            timed = runs[f"{name}, timed by part"]
            assert all(r["tokens"] == rows[name]["tokens"] for r in timed), f"{name}: timed run"
        hf_tokens = rows[HF].pop("tokens")
        batch_tokens = rows[HF_BATCH].pop("tokens") if HF_BATCH in rows else None
        check_same_tokens({k: v for k, v in rows.items() if k not in (HF, HF_BATCH)}, engine_tokens)
        same = sum(a == b for a, b in zip(engine_tokens, hf_tokens, strict=True))
        print(
            f"\nThe peer: a random LlamaForCausalLM of TinyLM's shape, the engine serving its "
            f"weights through from_hf; table 1's {n} prompts, {new} new tokens, greedy, "
            f"{threads} thread(s); generate takes one left-padded batch with an attention "
            f"mask ({hf.config._attn_implementation} attention)\n"
        )
        print_rows(rows, HF)
        print(
            f"same tokens as transformers: {same}/{n} requests"
            + ("" if same == n else "  WARNING: the engine and generate disagree")
        )
        same_batch = None
        if batch_tokens is not None:
            same_batch = sum(a == b for a, b in zip(engine_tokens, batch_tokens, strict=True))
            print(
                f"same tokens as generate_batch: {same_batch}/{n} requests"
                + ("" if same_batch == n else "  WARNING: the engine and generate_batch disagree")
            )
            for name in ("engine.generate, prefix caching", "engine.generate, no prefix caching"):
                ratios = [
                    a / b
                    for a, b in zip(
                        rows[name]["tokens_per_s_runs"],
                        rows[HF_BATCH]["tokens_per_s_runs"],
                        strict=True,
                    )
                ]
                x = spread(ratios)
                rows[name]["x_generate_batch"] = x["median"]
                print(f"{name} x generate_batch: {x['median']:.2f} ({x['min']:.2f}–{x['max']:.2f})")
        parts = {name: breakdown(runs[f"{name}, timed by part"]) for name in timed_runners}
        print(
            f"\nWhere the time goes ({REPEATS} more runs of each, in turn with the others; "
            "each part's own time, medians):"
        )
        for name, b in parts.items():
            print_breakdown(name, b, rows[name]["seconds"])
        peer = {
            "transformers_peer": {
                "transformers": transformers.__version__,
                "attention": hf.config._attn_implementation,
                "same_tokens_requests": same,
                "same_tokens_requests_generate_batch": same_batch,
                "rows": rows,
            },
            "where_the_time_goes": parts,
        }

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
            **peer,
        },
    )


if __name__ == "__main__":
    main()
