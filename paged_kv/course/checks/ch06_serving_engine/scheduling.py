"""Exercises 1-3 of chapter 06: the learner's scheduler admits and preempts like the
library's, step by step, and an engine on it, short of blocks, generates the cache-free
greedy tokens.

Fixed scenarios first, each naming one mistake: admission priced against what the step already
computes (the running requests' decodes included), stopped at the first request that does not
fit or get its blocks, with its status and queues changed only once `add_sequence` succeeded,
and no error but `OutOfBlocks` caught; preemption of the request it is given, keeping that
request (the same object, with its tokens), and letting the manager's errors through. Then the
random workloads of `workloads.compare_traces`, step by step against the library's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from paged_kv.cache.manager import KVCacheManager
from paged_kv.course.checks.ch06_serving_engine.workloads import (
    SYSTEM_PROMPT,
    compare_traces,
    sensitive_model,
)
from paged_kv.course.checks.failures import (
    CheckFailed,
    ExerciseNotDone,
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


class _RecordingManager(KVCacheManager):
    """A KVCacheManager that logs the scheduler's add_sequence and free_sequence calls, so a
    check can say which request a method freed or re-added."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.calls: list[tuple[str, Any]] = []
        super().__init__(*args, **kwargs)

    def add_sequence(self, seq_id: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(("add", seq_id))
        return super().add_sequence(seq_id, *args, **kwargs)

    def free_sequence(self, seq_id: Any) -> None:
        self.calls.append(("free", seq_id))
        super().free_sequence(seq_id)


def _chunks(plan: StepPlan) -> list[tuple[int, int, int, bool]]:
    return [(c.request.request_id, c.start, c.num_tokens, c.admitted) for c in plan.chunks]


def _must_raise(action: Callable[[], Any], doing: str, swallowed: str) -> None:
    """`action` makes the manager raise an error that is not OutOfBlocks: it must come through
    (any exception does); returning means the learner's code caught it."""
    try:
        action()
    except NotImplementedError as exc:
        raise learner_error(exc, doing=doing) from None
    except Exception:
        return  # the error came through
    raise CheckFailed(swallowed)


@exercise(1, "admission")
def check_admission(scheduler_cls: type[Scheduler]) -> None:
    """`scheduler_cls.admit_waiting` admits in order within the token, block and running caps."""
    _admission_scenarios(scheduler_cls)
    compare_traces(scheduler_cls, "admission")
    passed("admits like the library's scheduler, step by step")


def _admission_scenarios(scheduler_cls: type[Scheduler]) -> None:
    manager = _RecordingManager(12, 4)
    shared = list(range(100, 112))
    manager.add_sequence("earlier", [*shared, 1])
    manager.free_sequence("earlier")  # its 3 full blocks stay cached
    manager.calls.clear()
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
    freed = [seq_id for what, seq_id in manager.calls if what == "free"]
    expect(
        not freed,
        f"admit_waiting freed request {freed[0] if freed else ''}'s sequence "
        "(manager.free_sequence) after "
        "adding it: check the budget *before* add_sequence. Freeing after registering leaves "
        "its full blocks in the prefix cache though their K/V were never computed, so a later "
        "request would 'hit' them and read garbage.",
    )
    want = [(0, 0, 11, True), (1, 12, 2, True)]
    expect(
        got != [(i, s, n, False) for i, s, n, _ in want],
        f"your chunks are right but say admitted=False: {got}. An admission's chunk is "
        "ScheduledChunk(request, start, num_tokens, True): admitted=True marks a "
        "(re)admission's prefill (the engine counts it as prefill, its start as tokens the "
        "prefix cache saved); False is a running request's one-token decode.",
    )
    expect(
        (1, 0, 14, True) not in got,
        f"request 1's chunk starts at 0 and computes all 14 tokens ({got}), but its first 12 are "
        "prefix hits, already computed: start the chunk at request.num_cached_tokens (12, "
        "recorded by add_sequence) and compute only the 2 after it.",
    )
    expect(
        (3, 0, 1, True) not in got,
        f"request 3 was admitted past request 2, which did not fit the budget ({got}): stop at "
        "the first request that does not fit (first come, first served: the ones behind it "
        "wait too, or a stream of small requests would starve the big one).",
    )
    expect(
        got == want,
        f"budget 24 tokens: request 0 costs 11; request 1 has 14 tokens of which 12 are prefix "
        f"hits, so it costs 2 (price a request with manager.num_prefix_hit_tokens); request 2 "
        f"costs 15 and no longer fits, and request 3 must wait behind it. Expected chunks "
        f"{want} as (request, start, tokens, admitted), got {got}. A chunk starts at "
        "request.num_cached_tokens.",
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
    _admits_within_the_decodes(scheduler_cls)
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
    _stops_at_out_of_blocks(scheduler_cls)
    _lets_other_errors_through(scheduler_cls)


def _admits_within_the_decodes(scheduler_cls: type[Scheduler]) -> None:
    """Two requests are running: the step already computes their decodes (2 tokens of a
    budget of 10) when admit_waiting runs, so 8 are left and the step is not empty."""
    for cost in (11, 9):
        busy = scheduler_cls(KVCacheManager(16, 4), max_batch_tokens=10, max_running=4)
        running = [Request(i, [10 * i + 1, 10 * i + 2], SamplingParams()) for i in (0, 1)]
        for r in running:
            busy.add(r)
        Scheduler.admit_waiting(busy, StepPlan(0, 10))
        for r in running:
            r.record_sample(9)
        busy.add(Request(2, list(range(20, 20 + cost)), SamplingParams()))
        plan = StepPlan(1, 10)
        Scheduler.schedule_running(busy, plan)  # requests 0 and 1 decode: 1 token each
        call(
            f"admit_waiting(plan): budget 10, requests 0 and 1 running (their 2 decode tokens "
            f"already in plan.chunks), request 2 of {cost} tokens waiting",
            busy.admit_waiting,
            plan,
        )
        if not any(c.admitted for c in plan.chunks):
            continue
        total = plan.num_tokens
        if cost > 10:
            raise CheckFailed(
                f"requests 0 and 1 are running, so plan.chunks already holds their decodes (1 "
                f"token each) when admit_waiting runs; request 2 costs {cost}, more than the whole "
                f"budget of 10, and you admitted it: the step computes {total} tokens with a "
                "budget of 10. Only a request alone in an *empty* step may exceed the budget: "
                "test `plan.chunks` (decodes included), not just the chunks you admitted."
            )
        raise CheckFailed(
            f"requests 0 and 1 are running, so plan.chunks already holds their decodes (1 token "
            f"each) and plan.budget_left is 8; request 2 costs {cost} and you admitted it: the "
            f"step computes {total} tokens with a budget of 10. Compare the cost with "
            "plan.budget_left, which subtracts every chunk planned so far, the running "
            "requests' decodes too."
        )


def _stops_at_out_of_blocks(scheduler_cls: type[Scheduler]) -> None:
    """3 blocks of 4: request 0 (20 tokens) cannot get its 5 blocks; request 1 (1 token)
    could, but must wait behind it."""
    full = scheduler_cls(KVCacheManager(3, 4), max_batch_tokens=64, max_running=3)
    big, small = Request(0, list(range(20)), SamplingParams()), Request(1, [7], SamplingParams())
    full.add(big)
    full.add(small)
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
        big in full.waiting,
        "request 0 (20 tokens, 3 blocks of 4) left `waiting` though add_sequence refused it "
        "with OutOfBlocks: take a request out of `waiting` only once add_sequence has "
        "succeeded; here it is lost, neither waiting nor running.",
    )
    expect(
        small not in full.running and not plan.chunks,
        f"request 0 (20 tokens, 3 blocks of 4) could not get its blocks, and you admitted "
        f"request 1 behind it ({_chunks(plan)}): stop admitting at the first OutOfBlocks (first "
        "come, first served: the ones behind it wait too, or small requests would keep "
        "taking the blocks the big one waits for).",
    )
    expect(
        big.status is RequestStatus.WAITING,
        f"request 0's status is {big.status}, but add_sequence refused it with OutOfBlocks and "
        "it is still waiting: set RequestStatus.RUNNING only once add_sequence has succeeded.",
    )
    expect(
        list(full.waiting) == [big, small] and not len(full.manager),
        "when add_sequence raises OutOfBlocks, stop admitting and leave the request waiting.",
    )


def _lets_other_errors_through(scheduler_cls: type[Scheduler]) -> None:
    """Request 0's id is already live in the manager: add_sequence raises DuplicateSequence,
    which is a bug to surface, not a full pool."""
    dup = scheduler_cls(KVCacheManager(8, 4), max_batch_tokens=64, max_running=3)
    dup.manager.add_sequence(0, [1, 2, 3])
    dup.add(Request(0, [4, 5, 6], SamplingParams()))
    _must_raise(
        lambda: dup.admit_waiting(StepPlan(0, 64)),
        "admit_waiting(plan) with request 0's id already live in the manager",
        "request 0's id was already live in the manager, so add_sequence raised "
        "DuplicateSequence, and your admit_waiting returned as if the pool were full: catch "
        "only OutOfBlocks (`except OutOfBlocks:`); any other error is a bug that must come "
        "through, not a request left waiting forever.",
    )


@exercise(2, "preemption")
def check_preemption(scheduler_cls: type[Scheduler]) -> None:
    """`scheduler_cls.preempt` frees the victim's blocks and queues it first for recompute."""
    _preemption_scenarios(scheduler_cls)
    compare_traces(scheduler_cls, "preemption")
    passed("preempts like the library's scheduler, step by step")


def _preemption_scenarios(scheduler_cls: type[Scheduler]) -> None:
    manager = _RecordingManager(16, 4)
    manager.add_sequence("earlier", [*range(10, 18), 99])
    manager.free_sequence("earlier")  # request 1's first 8 tokens stay cached: 2 blocks
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
    victim = requests[1]  # not the newest: preempt takes out the request it is given
    manager.calls.clear()
    call("preempt(request 1, plan, 'a test')", scheduler.preempt, victim, plan, "a test")
    added = [seq_id for what, seq_id in manager.calls if what == "add"]
    expect(
        not added,
        f"preempt called manager.add_sequence for request {added[0] if added else ''} after "
        "freeing: leave the victim freed. It waits at the head of `waiting`, and admission "
        "re-adds it (recomputing what the prefix cache lost) when blocks are free.",
    )
    others = [r.request_id for r in requests if r is not victim and r.request_id not in manager]
    expect(
        victim.request_id not in manager or not others,
        f"preempt freed request {others[0] if others else ''}'s sequence, not the victim's "
        "(request 1, the one it was given): preempt the request passed in; the scheduler "
        "chooses the victim (the newest running) before calling preempt.",
    )
    expect(
        victim.request_id not in manager,
        "preempt must free the victim's sequence: self.manager.free_sequence(request.request_id).",
    )
    expect(
        manager.pool.num_in_use == in_use - 3,
        "the victim's 3 blocks must be released (manager.free_sequence does it).",
    )
    expect(
        scheduler.running != requests[:2],
        "you removed request 2, the last of `running`, instead of the victim, request 1: take "
        "out the request preempt is given, self.running.remove(request). The scheduler picks "
        "the newest, but preempt must not rely on it.",
    )
    expect(
        scheduler.running == [requests[0], requests[2]],
        f"remove the victim (request 1) from `running`, and only it: `running` should be "
        f"[request 0, request 2], got {scheduler.running}.",
    )
    expect(
        victim.output == [1] and victim.num_tokens == 10,
        f"request 1 lost its generated tokens (output {victim.output}, {victim.num_tokens} "
        "tokens; it had output [1], 10 tokens): keep the request as it is, its tokens and its "
        "pending token: recompute re-admits prompt + output.",
    )
    head = scheduler.waiting[0] if scheduler.waiting else None
    expect(
        head is victim or head is None or getattr(head, "request_id", None) != victim.request_id,
        "you queued a new Request for request 1: requeue the same object "
        "(self.waiting.appendleft(request)); it holds the prompt, the output generated so far "
        "and the pending token, and it is the one the engine returns.",
    )
    expect(
        list(scheduler.waiting) == [victim, waiting],
        "put the victim at the *head* of `waiting` (appendleft): it was admitted before "
        "the requests still waiting, and must not lose its turn.",
    )
    expect(victim.status is RequestStatus.WAITING, "set the victim's status to WAITING.")
    expect(victim.num_preemptions == 1, "count it: request.num_preemptions += 1.")
    want = Preemption(5, 1, 10, "a test")
    expect(
        [p.num_tokens for p in plan.preempted] != [2],
        f"record request.num_tokens, all of the victim's tokens (10: 9 prompt tokens and the "
        f"pending one), prefix hits included: they are what readmission looks up; got "
        f"{plan.preempted}, want [{want}].",
    )
    expect(
        plan.preempted == [want],
        "record Preemption(plan.step, request id, request.num_tokens, reason) in "
        f"plan.preempted: Preemption(5, 1, 10, 'a test') here (9 prompt tokens and the pending "
        f"one); got {plan.preempted}.",
    )
    _preempt_lets_errors_through(scheduler_cls)


def _preempt_lets_errors_through(scheduler_cls: type[Scheduler]) -> None:
    """The manager no longer holds the victim's sequence: free_sequence raises UnknownSequence,
    and preempt must let it through."""
    manager = KVCacheManager(16, 4)
    scheduler = scheduler_cls(manager, max_batch_tokens=64, max_running=4)
    requests = [Request(i, list(range(i * 10, i * 10 + 5)), SamplingParams()) for i in range(2)]
    for r in requests:
        scheduler.add(r)
    Scheduler.admit_waiting(scheduler, StepPlan(0, 64))
    manager.free_sequence(1)  # behind the scheduler's back
    _must_raise(
        lambda: scheduler.preempt(requests[1], StepPlan(5, 64), "a test"),
        "preempt(request 1, plan, 'a test')",
        "preempt(request 1, ...) when the manager no longer holds request 1's sequence: "
        "manager.free_sequence raised UnknownSequence and your preempt returned without it. "
        "Catch nothing in preempt: an error there is a bug in the scheduler's state, and "
        "hiding it leaves a request running with no blocks, or queued twice.",
    )


_QUESTIONS = [b"What is paging?", b"Why blocks?", b"Who evicts?"]


def _cause(scheduler_cls: type[Scheduler]) -> str:
    """When serving fails, the method at fault: exercise 1's and 2's fixed scenarios on
    `scheduler_cls`, then its random workloads with one method swapped for the library's."""
    own_admission = type(scheduler_cls.__name__, (scheduler_cls,), {"preempt": Scheduler.preempt})
    own_preempt = type(
        scheduler_cls.__name__, (scheduler_cls,), {"admit_waiting": Scheduler.admit_waiting}
    )
    trials: list[tuple[str, Callable[[], None]]] = [
        ("admit_waiting", lambda: _admission_scenarios(scheduler_cls)),
        ("preempt", lambda: _preemption_scenarios(scheduler_cls)),
        ("admit_waiting", lambda: compare_traces(own_admission, "admission")),
        ("preempt", lambda: compare_traces(own_preempt, "preemption")),
    ]
    for name, trial in trials:
        try:
            trial()
        except (CheckFailed, ExerciseNotDone) as exc:
            text = str(exc).split("\nReplay it:")[0]
            label = "Exercise 3 (both together): "
            text = text[len(label) :] if text.startswith(label) else text
            number = 1 if name == "admit_waiting" else 2
            return f"\nThe cause is in your {name} (exercise {number}): {text}"
        except Exception:  # a diagnosis only: the failure itself is reported
            continue
    return ""


_REPLAY = (
    "\nReplay it:\n"
    "    from paged_kv.serving.engine import Engine\n"
    "    from paged_kv.course.checks.ch06_serving_engine.workloads import sensitive_model\n"
    "    engine = Engine(sensitive_model(), num_blocks=12, block_size=8, scheduler={name})\n"
    "    engine.generate([list({system}) + list(q) for q in {questions}], 24)"
)


@exercise(3, "both together")
def check_serves_like_dense(scheduler_cls: type[Scheduler]) -> None:
    """An engine with `scheduler_cls`, short of blocks, generates the cache-free greedy tokens.
    A failure runs exercises 1 and 2's checks on the class to name the method at fault."""
    model = sensitive_model()
    prompts = [SYSTEM_PROMPT + list(q) for q in _QUESTIONS]
    engine = Engine(model, num_blocks=12, block_size=8, scheduler=scheduler_cls)
    replay = _REPLAY.format(
        name=scheduler_cls.__name__, system=repr(bytes(SYSTEM_PROMPT)), questions=_QUESTIONS
    )
    try:
        out = call("engine.generate(prompts, 24)", engine.generate, prompts, 24)
    except CheckFailed as exc:
        raise CheckFailed(f"{exc}{_cause(scheduler_cls)}{replay}") from None
    preemptions = len(engine.stats().preemptions)
    for i, (completion, prompt) in enumerate(zip(out, prompts, strict=True)):
        want = greedy_dense(model, prompt, 24)
        if completion.token_ids != want:
            raise CheckFailed(
                f"request {i} generated {completion.token_ids}, but cache-free greedy decoding "
                f"gives {want} ({preemptions} preemptions happened on the way). An admitted "
                "request must compute every token from its prefix hits on, and a preempted one "
                "keeps its output, so that prompt + output is recomputed."
                f"{_cause(scheduler_cls)}{replay}"
            )
    passed(f"served like dense decoding, through {preemptions} preemptions")
