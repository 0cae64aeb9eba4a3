"""Exercises 1-3 of chapter 06: the learner's scheduler admits and preempts like the
library's, step by step, and an engine on it, short of blocks, generates the cache-free
greedy tokens."""

from __future__ import annotations

from paged_kv.cache.manager import KVCacheManager
from paged_kv.course.checks.ch06_serving_engine.workloads import (
    SYSTEM_PROMPT,
    compare_traces,
    sensitive_model,
)
from paged_kv.course.checks.failures import (
    CheckFailed,
    call,
    exercise,
    expect,
    learner_error,
    passed,
)
from paged_kv.errors import OutOfBlocks
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import greedy_dense
from paged_kv.serving.scheduler import (
    Preemption,
    Request,
    RequestStatus,
    SamplingParams,
    Scheduler,
    StepPlan,
)


def _chunks(plan: StepPlan) -> list[tuple[int, int, int, bool]]:
    return [(c.request.request_id, c.start, c.num_tokens, c.admitted) for c in plan.chunks]


@exercise(1, "admission")
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
    call(
        "admit_waiting(plan) with 4 waiting requests and a budget of 24 tokens",
        scheduler.admit_waiting,
        plan,
    )
    got = _chunks(plan)
    expect(
        got == [(0, 0, 11, True), (1, 12, 2, True)],
        f"budget 24 tokens: request 0 costs 11; request 1 has 14 tokens of which 12 are prefix "
        f"hits, so it costs 2 (price a request with manager.num_prefix_hit_tokens); request 2 "
        f"costs 15 and no longer fits, and request 3 must wait behind it. Expected chunks "
        f"[(0, 0, 11, True), (1, 12, 2, True)] as (request, start, tokens, admitted), got "
        f"{got}. A chunk starts at request.num_cached_tokens.",
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
    exact = scheduler_cls(KVCacheManager(12, 4), max_batch_tokens=10, max_running=3)
    for i, n in enumerate((4, 6)):
        exact.add(Request(i, list(range(10 * i, 10 * i + n)), SamplingParams()))
    plan = StepPlan(0, 10)
    call(
        "admit_waiting(plan): requests of 4 and 6 tokens, a budget of 10", exact.admit_waiting, plan
    )
    expect(
        len(plan.chunks) == 2,
        f"budget 10: request 0 costs 4, request 1 costs 6, exactly the {10 - 4} tokens left, "
        f"so it fits and must be admitted (stop only when the cost is *more* than "
        f"plan.budget_left); got chunks {_chunks(plan)}.",
    )
    alone = scheduler_cls(KVCacheManager(12, 4), max_batch_tokens=8, max_running=3)
    alone.add(Request(0, list(range(20)), SamplingParams()))
    plan = StepPlan(0, 8)
    call("admit_waiting(plan): one request of 20 tokens, a budget of 8", alone.admit_waiting, plan)
    expect(
        len(plan.chunks) == 1,
        "a request costing more than the whole budget (20 tokens, budget 8) must still run, "
        "alone in an empty step; otherwise it waits forever.",
    )
    capped = scheduler_cls(KVCacheManager(12, 4), max_batch_tokens=64, max_running=2)
    for i in range(3):
        capped.add(Request(i, [i], SamplingParams()))
    plan = StepPlan(0, 64)
    call("admit_waiting(plan): 3 one-token requests, max_running=2", capped.admit_waiting, plan)
    expect(
        len(plan.chunks) == 2 and len(capped.waiting) == 1,
        f"max_running=2: only 2 requests may run at once; you admitted {len(plan.chunks)}.",
    )
    full = scheduler_cls(KVCacheManager(3, 4), max_batch_tokens=64, max_running=3)
    full.add(Request(0, list(range(20)), SamplingParams()))
    plan = StepPlan(0, 64)
    try:
        full.admit_waiting(plan)  # 5 blocks needed, 3 exist
    except OutOfBlocks:
        raise CheckFailed(
            "admit_waiting let OutOfBlocks escape (a 20-token request, 3 blocks of 4): catch it "
            "around add_sequence and stop admitting (nothing changed, the request waits for "
            "blocks to be freed)."
        ) from None
    except Exception as exc:
        raise learner_error(exc, doing="admit_waiting with too few blocks") from None
    expect(
        not plan.chunks and len(full.waiting) == 1 and not len(full.manager),
        "when add_sequence raises OutOfBlocks, stop admitting and leave the request waiting.",
    )
    compare_traces(scheduler_cls, "admission")
    passed("admits like the library's scheduler, step by step")


@exercise(2, "preemption")
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
    call("preempt(request 2, plan, 'a test')", scheduler.preempt, victim, plan, "a test")
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
        victim.output == [1] and victim.num_tokens == 10,
        "keep the request's tokens and its pending token: recompute re-admits prompt + output.",
    )
    expect(
        plan.preempted == [Preemption(5, 2, 10, "a test")],
        "record Preemption(plan.step, request id, request.num_tokens, reason) in "
        f"plan.preempted: Preemption(5, 2, 10, 'a test') here (9 prompt tokens and the pending "
        f"one); got {plan.preempted}.",
    )
    compare_traces(scheduler_cls, "preemption")
    passed("preempts like the library's scheduler, step by step")


_QUESTIONS = [b"What is paging?", b"Why blocks?", b"Who evicts?"]


@exercise(3, "both together")
def check_serves_like_dense(scheduler_cls: type[Scheduler]) -> None:
    """An engine with `scheduler_cls`, short of blocks, generates the cache-free greedy tokens."""
    model = sensitive_model()
    prompts = [SYSTEM_PROMPT + list(q) for q in _QUESTIONS]
    engine = Engine(model, num_blocks=12, block_size=8, scheduler=scheduler_cls)
    out = call("engine.generate(prompts, 24)", engine.generate, prompts, 24)
    preemptions = len(engine.stats().preemptions)
    for i, (completion, prompt) in enumerate(zip(out, prompts, strict=True)):
        want = greedy_dense(model, prompt, 24)
        expect(
            completion.token_ids == want,
            f"request {i} generated {completion.token_ids}, but cache-free greedy decoding "
            f"gives {want} ({preemptions} preemptions happened on the way). An admitted "
            "request must compute every token from its prefix hits on, and a preempted one "
            "keeps its output, so that prompt + output is recomputed.\nReplay it:\n"
            "    from paged_kv.course.checks.ch06_serving_engine.workloads import "
            "sensitive_model\n"
            f"    engine = Engine(sensitive_model(), num_blocks=12, block_size=8, "
            f"scheduler={scheduler_cls.__name__})\n"
            f"    engine.generate([list(b{bytes(SYSTEM_PROMPT).decode()!r}) + list(q) for q in "
            f"{_QUESTIONS}], 24)",
        )
    passed(f"served like dense decoding, through {preemptions} preemptions")
