"""Chapter 06 checks: a learner's scheduler admits, preempts and serves like the library's,
and the engine on it generates the dense tokens."""

from __future__ import annotations

import functools
import random
from typing import Any

from paged_kv.cache.block_table import blocks_needed as reference_blocks_needed
from paged_kv.cache.manager import KVCacheManager
from paged_kv.course.checks.support import (
    CheckFailed,
    expect,
    passed,
)
from paged_kv.errors import OutOfBlocks
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import ModelConfig, TinyLM, greedy_dense
from paged_kv.serving.scheduler import (
    Preemption,
    Request,
    RequestStatus,
    SamplingParams,
    Scheduler,
    StepPlan,
)


@functools.cache
def _small_model() -> TinyLM:
    return TinyLM(ModelConfig(hidden_size=32, intermediate_size=64, num_layers=1), seed=0)


def _engine_trace(scheduler_cls: type[Scheduler], seed: int) -> tuple[list[Any], list[list[int]]]:
    """Serve a random small workload under tight budgets with `scheduler_cls`; return what
    every step computed and preempted, and each request's tokens."""
    rng = random.Random(seed)
    shared = [rng.randrange(256) for _ in range(rng.choice([0, 12, 20]))]
    prompts = [shared + [rng.randrange(256) for _ in range(rng.randrange(1, 20))] for _ in range(6)]
    block_size, new = rng.choice([1, 4, 8]), 6
    longest = max(reference_blocks_needed(len(p) + new, block_size) for p in prompts)
    engine = Engine(
        _small_model(),
        num_blocks=longest + rng.randrange(0, 4),
        block_size=block_size,
        max_batch_tokens=rng.choice([16, 32, 64]),
        max_running=rng.choice([2, 4, 8]),
        scheduler=scheduler_cls,
    )
    ids = [engine.add_request(p, SamplingParams(new)) for p in prompts]
    steps: list[Any] = []
    while engine.has_unfinished() and len(steps) < 500:
        plan = engine.step()
        computed = [(c.request.request_id, c.start, c.num_tokens, c.admitted) for c in plan.chunks]
        steps.append((computed, [(p.request_id, p.num_tokens) for p in plan.preempted]))
    return steps, [engine.requests[i].output for i in ids]


def _compare_traces(scheduler_cls: type[Scheduler], what: str) -> None:
    for seed in range(6):
        theirs, their_tokens = _engine_trace(scheduler_cls, seed)
        ours, our_tokens = _engine_trace(Scheduler, seed)
        for step, (mine, want) in enumerate(zip(theirs, ours, strict=False)):
            expect(
                mine == want,
                f"workload {seed}, step {step}: your {what} led to computing {mine[0]} and "
                f"preempting {mine[1]}, the reference computes {want[0]} and preempts "
                f"{want[1]} (entries: (request, first position, tokens, admitted)).",
            )
        expect(len(theirs) == len(ours), f"workload {seed}: {len(theirs)} steps, want {len(ours)}.")
        expect(their_tokens == our_tokens, f"workload {seed}: the generated tokens differ.")


def check_admission(scheduler_cls: type[Scheduler]) -> None:
    """`scheduler_cls.admit_waiting` admits in order within the token, block and running caps."""
    manager = KVCacheManager(12, 4)
    shared = list(range(100, 112))
    manager.add_sequence("earlier", [*shared, 1])
    manager.free_sequence("earlier")  # its 3 full blocks stay cached
    scheduler = scheduler_cls(manager, max_batch_tokens=24, max_running=3)
    fresh = Request(0, list(range(11)), SamplingParams())
    hit = Request(1, [*shared, 7, 8], SamplingParams())  # 14 tokens, 12 of them cached
    big = Request(2, list(range(50, 65)), SamplingParams())
    tiny = Request(3, [5], SamplingParams())
    for r in (fresh, hit, big, tiny):
        scheduler.add(r)
    plan = StepPlan(0, 24)
    scheduler.admit_waiting(plan)
    got = [(c.request.request_id, c.start, c.num_tokens, c.admitted) for c in plan.chunks]
    expect(
        got == [(0, 0, 11, True), (1, 12, 2, True)],
        f"budget 24 tokens: request 0 costs 11; request 1 has 14 tokens of which 12 are prefix "
        f"hits, so it costs 2 (price a request with manager.num_prefix_hit_tokens); request 2 "
        f"costs 15 and no longer fits, and request 3 must wait behind it. Expected chunks "
        f"[(0, 0, 11, True), (1, 12, 2, True)] as (request, start, tokens, admitted), got "
        f"{got}. A chunk starts at manager.num_cached_tokens(id).",
    )
    expect(
        scheduler.running == [fresh, hit] and list(scheduler.waiting) == [big, tiny],
        "admitted requests move from the head of `waiting` to the end of `running`; the "
        "rest stay waiting, in order.",
    )
    expect(
        hit.status is RequestStatus.RUNNING and big.status is RequestStatus.WAITING,
        "set request.status to RequestStatus.RUNNING when you admit it.",
    )
    expect(
        hit.num_cached_tokens == 12 and fresh.num_cached_tokens == 0,
        "admit the request's own sequence, manager.add_sequence(request_id, "
        "request.admission_sequence()): the manager records its prefix hits there "
        "(request.num_cached_tokens) and appends to it while it runs; a copy of its tokens "
        "would leave the request behind.",
    )
    alone = scheduler_cls(KVCacheManager(12, 4), max_batch_tokens=8, max_running=3)
    alone.add(Request(0, list(range(20)), SamplingParams()))
    plan = StepPlan(0, 8)
    alone.admit_waiting(plan)
    expect(
        len(plan.chunks) == 1,
        "a request costing more than the whole budget must still run, alone in an empty step; "
        "otherwise it waits forever.",
    )
    full = scheduler_cls(KVCacheManager(3, 4), max_batch_tokens=64, max_running=3)
    full.add(Request(0, list(range(20)), SamplingParams()))
    plan = StepPlan(0, 64)
    try:
        full.admit_waiting(plan)  # 5 blocks needed, 3 exist
    except OutOfBlocks as err:
        raise CheckFailed(
            "admit_waiting let OutOfBlocks escape; catch it around add_sequence and stop "
            "admitting (nothing changed, the request waits for blocks to be freed)."
        ) from err
    expect(
        not plan.chunks and len(full.waiting) == 1 and not len(full.manager),
        "when add_sequence raises OutOfBlocks, stop admitting and leave the request waiting.",
    )
    _compare_traces(scheduler_cls, "admission")
    passed("admission")


def check_preemption(scheduler_cls: type[Scheduler]) -> None:
    """`scheduler_cls.preempt` frees the victim's blocks and queues it first for recompute."""
    manager = KVCacheManager(16, 4)
    scheduler = scheduler_cls(manager, max_batch_tokens=64, max_running=4)
    requests = [Request(i, list(range(i * 10, i * 10 + 9)), SamplingParams()) for i in range(3)]
    for r in requests:
        scheduler.add(r)
    Scheduler.admit_waiting(scheduler, StepPlan(0, 64))
    for r in requests:
        r.record_sample(1)  # sampled, pending
    waiting = Request(9, [3, 4], SamplingParams())
    scheduler.add(waiting)
    in_use = manager.pool.num_in_use
    plan = StepPlan(5, 64)
    victim = requests[2]
    scheduler.preempt(victim, plan, "a test")
    expect(victim.request_id not in manager, "preempt must free the victim's sequence.")
    expect(
        manager.pool.num_in_use == in_use - 3,
        "the victim's 3 blocks must be released (manager.free_sequence does it).",
    )
    expect(victim not in scheduler.running, "remove the victim from `running`.")
    expect(
        list(scheduler.waiting) == [victim, waiting],
        "put the victim at the *head* of `waiting` (appendleft): it was admitted before "
        "the requests still waiting, and must not lose its turn.",
    )
    expect(victim.status is RequestStatus.WAITING, "set the victim's status to WAITING.")
    expect(victim.num_preemptions == 1, "count it: request.num_preemptions += 1.")
    expect(
        plan.preempted == [Preemption(5, 2, 10, "a test")],
        "record Preemption(plan.step, request id, request.num_tokens, reason) in "
        f"plan.preempted; got {plan.preempted}.",
    )
    expect(victim.output == [1], "keep the output: recompute re-admits prompt + output.")
    _compare_traces(scheduler_cls, "preemption")
    passed("preemption by recompute")


def check_serves_like_dense(scheduler_cls: type[Scheduler]) -> None:
    """An engine with `scheduler_cls`, short of blocks, generates the cache-free greedy tokens."""
    model = TinyLM(seed=0)
    system = list(b"You are a terse assistant. Reply in one line.\n")
    prompts = [system + list(q) for q in (b"What is paging?", b"Why blocks?", b"Who evicts?")]
    engine = Engine(model, num_blocks=12, block_size=8, scheduler=scheduler_cls)
    out = engine.generate(prompts, 24)
    preemptions = len(engine.stats().preemptions)
    for i, (completion, prompt) in enumerate(zip(out, prompts, strict=True)):
        want = greedy_dense(model, prompt, 24)
        expect(
            completion.token_ids == want,
            f"request {i} generated {completion.token_ids}, but cache-free greedy decoding "
            f"gives {want} ({preemptions} preemptions happened on the way). An admitted "
            "request must compute every token from its prefix hits on, and a preempted one "
            "keeps its output, so that prompt + output is recomputed.",
        )
    passed(f"served like dense decoding, through {preemptions} preemptions")
