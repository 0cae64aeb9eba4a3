"""Chapter 06's engine workloads, replayable: `workload(scheduler_cls, seed)` rebuilds the
engine and the prompts a failing message names, `sensitive_model()` is a TinyLM whose tokens
depend on every token of the context, and `compare_traces` serves the same workloads with the
learner's scheduler and the library's, step by step."""

from __future__ import annotations

import functools
import random
from typing import Any

import torch

from paged_kv.cache.block_table import blocks_needed as reference_blocks_needed
from paged_kv.course.checks.failures import call, expect
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import ModelConfig, TinyLM
from paged_kv.serving.scheduler import SamplingParams, Scheduler

SYSTEM_PROMPT = list(b"You are a terse assistant. Reply in one line.\n")


@functools.cache
def _small_model() -> TinyLM:
    return TinyLM(ModelConfig(hidden_size=32, intermediate_size=64, num_layers=1), seed=0)


@functools.cache
def sensitive_model() -> TinyLM:
    """TinyLM(seed=0) with sharper attention (queries and keys ×3) that weighs more (output
    projection ×4): with random weights a plain TinyLM's next token depends mostly on the last
    token, so a wrong K/V elsewhere could go unnoticed; here changing any one token of a
    prompt changes what it generates."""
    model = TinyLM(seed=0)
    with torch.no_grad():
        for layer in model.layers:
            layer.self_attn.q_proj.weight *= 3
            layer.self_attn.k_proj.weight *= 3
            layer.self_attn.o_proj.weight *= 4
    return model


def workload(scheduler_cls: type[Scheduler], seed: int) -> tuple[Engine, list[list[int]]]:
    """The engine (tight budgets, `scheduler_cls`) and the 6 prompts of random workload `seed`;
    each request generates 6 tokens."""
    rng = random.Random(seed)
    shared = [rng.randrange(256) for _ in range(rng.choice([0, 12, 20]))]
    prompts = [shared + [rng.randrange(256) for _ in range(rng.randrange(1, 20))] for _ in range(6)]
    block_size = rng.choice([1, 4, 8])
    longest = max(reference_blocks_needed(len(p) + 6, block_size) for p in prompts)
    engine = Engine(
        _small_model(),
        num_blocks=longest + rng.randrange(0, 4),
        block_size=block_size,
        max_batch_tokens=rng.choice([16, 32, 64]),
        max_running=rng.choice([2, 4, 8]),
        scheduler=scheduler_cls,
    )
    return engine, prompts


def _engine_trace(
    scheduler_cls: type[Scheduler], seed: int, what: str = ""
) -> tuple[list[Any], list[list[int]]]:
    """Serve workload `seed`; return what every step computed and preempted, and the tokens.
    A step over its token budget fails at once, unless it is one request alone (`what` names
    the learner's part for that message)."""
    engine, prompts = workload(scheduler_cls, seed)
    ids = [engine.add_request(p, SamplingParams(6)) for p in prompts]
    budget = engine.scheduler.max_batch_tokens
    steps: list[Any] = []
    while engine.has_unfinished() and len(steps) < 500:
        plan = call(f"step {len(steps)} of workload {seed}", engine.step)
        expect(
            plan.num_tokens <= budget or len(plan.chunks) == 1,
            f"workload {seed}, step {len(steps)}: your {what or 'scheduler'} made the step "
            f"compute {plan.num_tokens} tokens ({plan.describe()}) with a budget of {budget}: "
            "price an admission against plan.budget_left, which subtracts every chunk planned "
            "so far, the running requests' decodes too; only a request alone in an empty step "
            "may exceed the budget." + _replay_hint(scheduler_cls.__name__, seed, len(steps) + 1),
        )
        computed = [(c.request.request_id, c.start, c.num_tokens, c.admitted) for c in plan.chunks]
        steps.append((computed, [(p.request_id, p.num_tokens) for p in plan.preempted]))
    return steps, [engine.requests[i].output for i in ids]


def _replay_hint(name: str, seed: int, steps: int) -> str:
    return (
        "\nReplay it:\n"
        "    from paged_kv.serving.scheduler import SamplingParams\n"
        "    from paged_kv.course.checks.ch06_serving_engine.workloads import workload\n"
        f"    engine, prompts = workload({name}, seed={seed})\n"
        "    for p in prompts:\n"
        "        engine.add_request(p, SamplingParams(6))\n"
        f"    for _ in range({steps}):\n"
        "        print(engine.step().describe())  # request:tokens, * for an admission"
    )


@functools.cache
def _library_trace(seed: int) -> tuple[list[Any], list[list[int]]]:
    return _engine_trace(Scheduler, seed)


def compare_traces(scheduler_cls: type[Scheduler], what: str) -> None:
    name = scheduler_cls.__name__
    for seed in range(6):
        theirs, their_tokens = _engine_trace(scheduler_cls, seed, what)
        ours, our_tokens = _library_trace(seed)
        for step, (mine, want) in enumerate(zip(theirs, ours, strict=False)):
            expect(
                mine == want,
                f"workload {seed}, step {step}: your {what} led to computing {mine[0]} and "
                f"preempting {mine[1]}; the library's scheduler computes {want[0]} and preempts "
                f"{want[1]} (each entry: (request, first position, tokens, admitted))."
                + _replay_hint(name, seed, step + 1),
            )
        expect(
            len(theirs) == len(ours),
            f"workload {seed}: {len(theirs)} steps, want {len(ours)}."
            + _replay_hint(name, seed, len(ours)),
        )
        expect(
            their_tokens == our_tokens,
            f"workload {seed}: the generated tokens differ." + _replay_hint(name, seed, len(ours)),
        )
