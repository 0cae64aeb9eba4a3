"""Chapter 06 checks: a learner's scheduler admits and preempts like the library's, and an
engine on it, short of blocks, generates the cache-free greedy tokens. Each fixed scenario is
the Python that sets it up (the replay), run with the learner's class and with `Scheduler`,
compared on all a call may change (`_SEEN`); then random engine workloads, step by step."""

from __future__ import annotations

import functools
import random
from typing import Any

from paged_kv.cache.block_table import blocks_needed
from paged_kv.cache.manager import KVCacheManager
from paged_kv.course.checks import causes
from paged_kv.course.checks.capstone import (
    SYSTEM_PROMPT,
    check_capstone,
    one_thread,
    sensitive_model,
)
from paged_kv.course.checks.failures import CheckFailed, call, exercise, passed
from paged_kv.course.checks.harness import Trial, fixed, quiet
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import ModelConfig, TinyLM, greedy_dense
from paged_kv.serving.scheduler import Request, SamplingParams, Scheduler, StepPlan

__all__ = ["check_admission", "check_capstone", "check_preemption", "check_serves_like_dense"]


class _RecordingManager(KVCacheManager):
    """A KVCacheManager that logs the add_sequence and free_sequence calls made to it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.calls: list[tuple[str, Any]] = []
        super().__init__(*args, **kwargs)

    def add_sequence(self, seq_id: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(("add", seq_id))
        return super().add_sequence(seq_id, *args, **kwargs)

    def free_sequence(self, seq_id: Any) -> None:
        self.calls.append(("free", seq_id))
        super().free_sequence(seq_id)


def _name(cls: type[Scheduler]) -> str:
    """The class's name in a scenario (whose setup uses the library's `Scheduler`)."""
    return cls.__name__ if cls.__name__ != "Scheduler" else "TheScheduler"


def _scene(code: str, cls: type[Scheduler]) -> dict[str, Any]:
    names: dict[str, Any] = {c.__name__: c for c in (Request, SamplingParams, Scheduler, StepPlan)}
    names |= {"KVCacheManager": _RecordingManager, _name(cls): cls}
    exec(code.format(cls=_name(cls)), names)  # the check's own scenario, shown as the replay
    names["manager"].calls.clear()
    names["requests"] = sorted(
        [*names["scheduler"].waiting, *names["scheduler"].running], key=lambda r: r.request_id
    )
    return names


# what a scheduler's call may change, read on both scenes (manager.calls: its add and free calls)
_SEEN = [
    "[(c.request.request_id, c.start, c.num_tokens, c.admitted) for c in plan.chunks]",
    "list(plan.preempted)",
    "[r.request_id for r in scheduler.waiting]",
    "all(any(r is g for g in requests) for r in scheduler.waiting)",
    "[r.request_id for r in scheduler.running]",
    "[(r.status.value, r.output, r.num_cached_tokens, r.num_preemptions) for r in requests]",
    "[r.request_id for r in requests if r.request_id in manager]",
    "manager.pool.num_in_use",
    "manager.calls",
]


def _scenario(cls: type[Scheduler], code: str, line: str, hint: str) -> None:
    """Run `line` after `code` with the learner's class and the library's; compare."""

    def play(trial: Trial) -> None:
        mine, theirs = _scene(code, cls), _scene(code, Scheduler)
        for text in code.format(cls=_name(cls)).strip().splitlines():
            trial.note(text)
        trial.same(line, lambda: eval(line, mine), lambda: eval(line, theirs), hint=hint)
        for expr in _SEEN:
            trial.expect(expr, eval(expr, mine), eval(expr, theirs), hint)

    fixed(play)


_SETUP = "requests = [Request(i, prompt, SamplingParams()) for i, prompt in enumerate({prompts})]"
_ADD = "for r in requests:\n    scheduler.add(r)\n"


def _admission(
    budget: int, prompts: str, *, blocks: int = 12, running: int = 3, cached: str = ""
) -> str:
    return (
        f"manager = KVCacheManager({blocks}, 4)\n{cached}"
        f"scheduler = {{cls}}(manager, max_batch_tokens={budget}, max_running={running})\n"
        f"{_SETUP.format(prompts=prompts)}\n{_ADD}plan = StepPlan(0, {budget})"
    )


_CACHED = (
    'manager.add_sequence("earlier", list(range(100, 112)) + [1])\n'
    'manager.free_sequence("earlier")  # its 3 full blocks stay cached\n'
)
_DECODES = """manager = KVCacheManager(16, 4)
scheduler = {{cls}}(manager, max_batch_tokens=10, max_running=4)
for i in (0, 1):
    scheduler.add(Request(i, [10 * i + 1, 10 * i + 2], SamplingParams()))
Scheduler.admit_waiting(scheduler, StepPlan(0, 10))
for r in scheduler.running:
    r.record_sample(9)
scheduler.add(Request(2, list(range(20, {end})), SamplingParams()))
plan = StepPlan(1, 10)
Scheduler.schedule_running(scheduler, plan)  # requests 0 and 1 decode: 2 of the 10 tokens"""
_PRICE = (
    "A request costs its tokens minus its prefix hits (manager.num_prefix_hit_tokens); admit "
    "in order while the cost fits plan.budget_left, and stop at the first that does not (a "
    "request alone in an empty step may exceed the budget); add_sequence(request_id, "
    "request.admission_sequence()) before changing its status or the queues; its chunk is "
    "ScheduledChunk(request, request.num_cached_tokens, the rest, True)"
)
_ADMISSIONS = [
    (_admission(24, "[list(range(11)), list(range(100, 112)) + [7, 8], list(range(50, 65)), [5]]",
                cached=_CACHED), _PRICE),
    (_DECODES.format(end=31), "plan.budget_left already counts the running requests' decodes, "
     "so the step is not empty: " + _PRICE),
    (_DECODES.format(end=29), "plan.budget_left already counts the running requests' decodes"),
    (_admission(10, "[list(range(4)), list(range(10, 16))]"),
     "A cost equal to plan.budget_left fits"),
    (_admission(8, "[list(range(20))]"),
     "A request bigger than the whole budget runs alone in an empty step"),
    (_admission(64, "[[0], [1], [2]]", running=2), "At most max_running requests run at once"),
    (_admission(64, "[list(range(20)), [7]]", blocks=3), "When add_sequence raises OutOfBlocks "
     "nothing changed: stop admitting, the request keeps waiting (and those behind it)"),
    (_admission(64, "[[4, 5, 6]]", cached="manager.add_sequence(0, [1, 2, 3])  # id 0 is taken\n"),
     "Catch only OutOfBlocks: any other error is a bug that must come through"),
]  # fmt: skip


@exercise(1, "admission")
def check_admission(scheduler_cls: type[Scheduler]) -> None:
    """`scheduler_cls.admit_waiting` admits in order within the token, block and running caps."""
    for code, hint in _ADMISSIONS:
        _scenario(scheduler_cls, code, "scheduler.admit_waiting(plan)", hint)
    _compare_traces(scheduler_cls, "admission")
    passed("admits like the library's scheduler, step by step")


_PREEMPTIONS = [
    (
        """manager = KVCacheManager(16, 4)
manager.add_sequence("earlier", list(range(10, 18)) + [99])
manager.free_sequence("earlier")  # request 1's first 8 tokens stay cached
scheduler = {cls}(manager, max_batch_tokens=64, max_running=4)
for i in range(3):
    scheduler.add(Request(i, list(range(i * 10, i * 10 + 9)), SamplingParams()))
Scheduler.admit_waiting(scheduler, StepPlan(0, 64))
for r in scheduler.running:
    r.record_sample(1)  # sampled, pending
scheduler.add(Request(9, [3, 4], SamplingParams()))
plan, victim = StepPlan(5, 64), scheduler.running[1]""",
        "Preempt the request given: free its sequence, take it out of running, status WAITING, "
        "num_preemptions + 1, the same object (its tokens and its pending one) at the head of "
        "waiting, and Preemption(plan.step, its id, request.num_tokens, reason) in plan.preempted",
    ),
    (
        """manager = KVCacheManager(16, 4)
scheduler = {cls}(manager, max_batch_tokens=64, max_running=4)
for i in range(2):
    scheduler.add(Request(i, list(range(i * 10, i * 10 + 5)), SamplingParams()))
Scheduler.admit_waiting(scheduler, StepPlan(0, 64))
manager.free_sequence(1)  # behind the scheduler's back
plan, victim = StepPlan(5, 64), scheduler.running[1]""",
        "Catch nothing in preempt: an error there is a bug in the scheduler's state",
    ),
]


@exercise(2, "preemption")
def check_preemption(scheduler_cls: type[Scheduler]) -> None:
    """`scheduler_cls.preempt` frees the victim's blocks and queues it first for recompute."""
    for code, hint in _PREEMPTIONS:
        _scenario(scheduler_cls, code, "scheduler.preempt(victim, plan, 'a test')", hint)
    _compare_traces(scheduler_cls, "preemption")
    passed("preempts like the library's scheduler, step by step")


# -- random workloads, step by step ------------------------------------------------------------


@functools.cache
def _small_model() -> TinyLM:
    return TinyLM(ModelConfig(hidden_size=32, intermediate_size=64, num_layers=1), seed=0)


def workload(scheduler_cls: type[Scheduler], seed: int) -> tuple[Engine, list[list[int]]]:
    """The engine (tight budgets, `scheduler_cls`) and the 6 prompts of random workload `seed`;
    each request generates 6 tokens."""
    rng = random.Random(seed)
    shared = [rng.randrange(256) for _ in range(rng.choice([0, 12, 20]))]
    prompts = [shared + [rng.randrange(256) for _ in range(rng.randrange(1, 20))] for _ in range(6)]
    block_size = rng.choice([1, 4, 8])
    longest = max(blocks_needed(len(p) + 6, block_size) for p in prompts)
    engine = Engine(_small_model(), num_blocks=longest + rng.randrange(0, 4), block_size=block_size,
                    max_batch_tokens=rng.choice([16, 32, 64]), max_running=rng.choice([2, 4, 8]),
                    scheduler=scheduler_cls)  # fmt: skip
    return engine, prompts


def _trace(scheduler_cls: type[Scheduler], seed: int) -> tuple[list[Any], list[list[int]]]:
    """What every step of workload `seed` computed and preempted, and the tokens."""
    engine, prompts = workload(scheduler_cls, seed)
    ids = [engine.add_request(p, SamplingParams(6)) for p in prompts]
    steps: list[Any] = []
    while engine.has_unfinished() and len(steps) < 500:
        plan = call(f"step {len(steps)} of workload {seed}", engine.step)
        chunks = [(c.request.request_id, c.start, c.num_tokens, c.admitted) for c in plan.chunks]
        steps.append((chunks, [(p.request_id, p.num_tokens) for p in plan.preempted]))
    return steps, [engine.requests[i].output for i in ids]


_library_trace = functools.cache(functools.partial(_trace, Scheduler))


def _compare_traces(scheduler_cls: type[Scheduler], what: str) -> None:
    for seed in range(6):
        with one_thread():
            (mine, tokens), (theirs, want) = _trace(scheduler_cls, seed), _library_trace(seed)
        same = len(mine) == len(theirs) and tokens == want
        differ = (i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b)
        step = next(differ, None if same else min(len(mine), len(theirs)))
        if step is None:
            continue
        got, wanted = (s[step] if step < len(s) else "no step" for s in (mine, theirs))
        hint = (f"Each entry: (request, first position, tokens, admitted), then (request, tokens) "
                f"preempted. Your {what} differs from the library's here")  # fmt: skip
        message = causes.say(causes.WRONG_STATE, hint, line=f"step {step} of workload {seed}",
                             expr="(computed, preempted)", want=wanted, got=got)  # fmt: skip
        raise CheckFailed(
            f"{message}\nReplay it:\n    from paged_kv.serving.scheduler import SamplingParams\n"
            "    from paged_kv.course.checks.ch06_serving_engine import workload\n"
            f"    engine, prompts = workload({scheduler_cls.__name__}, seed={seed})\n"
            "    for p in prompts:\n        engine.add_request(p, SamplingParams(6))\n"
            f"    for _ in range({step + 1}):\n"
            "        print(engine.step().describe())  # request:tokens, * for an admission",
            causes.WRONG_STATE,
        )


# -- exercise 3: both together -----------------------------------------------------------------

_QUESTIONS = [b"What is paging?", b"Why blocks?", b"Who evicts?"]


def _at_fault(scheduler_cls: type[Scheduler]) -> CheckFailed | None:
    """Exercise 1's and 2's checks on `scheduler_cls`, each method alone: the first that fails."""
    for check, method in ((check_admission, "admit_waiting"), (check_preemption, "preempt")):
        alone = type(
            scheduler_cls.__name__,
            (scheduler_cls,),
            {m: getattr(Scheduler, m) for m in ("admit_waiting", "preempt") if m != method},
        )
        try:
            check(alone)
        except CheckFailed as failure:
            return CheckFailed(f"\nThe cause is in your {method}: {failure}", failure.cause)
        except Exception:  # a diagnosis only: the failure itself is reported
            continue
    return None


@exercise(3, "both together")
def check_serves_like_dense(scheduler_cls: type[Scheduler]) -> None:
    """An engine with `scheduler_cls`, short of blocks, generates the cache-free greedy tokens.
    A failure runs exercises 1 and 2's checks on each method to name the one at fault."""
    model, prompts = sensitive_model(), [SYSTEM_PROMPT + list(q) for q in _QUESTIONS]
    engine = Engine(model, num_blocks=12, block_size=8, scheduler=scheduler_cls)
    failure: CheckFailed | None = None
    try:
        with one_thread():
            out = call("engine.generate(prompts, 24)", engine.generate, prompts, 24)
            wants = [greedy_dense(model, prompt, 24) for prompt in prompts]
    except CheckFailed as error:
        failure = error
    else:
        for i, (completion, want) in enumerate(zip(out, wants, strict=True)):
            if completion.token_ids != want and failure is None:
                hint = ("An admitted request computes every token from its prefix hits on; a "
                        "preempted one keeps its output, recomputed with its prompt")  # fmt: skip
                line, got = f"request {i}'s tokens", completion.token_ids
                message = causes.say(causes.WRONG_RESULT, hint, line=line, want=want, got=got)
                failure = CheckFailed(message, causes.WRONG_RESULT)
    if failure is not None:
        with quiet():
            found = _at_fault(scheduler_cls)
        raise CheckFailed(
            f"{failure}{found or ''}\nReplay it:\n    from paged_kv.serving.engine import Engine\n"
            "    from paged_kv.course.checks.capstone import SYSTEM_PROMPT, sensitive_model\n"
            "    engine = Engine(sensitive_model(), num_blocks=12, block_size=8, "
            f"scheduler={scheduler_cls.__name__})\n"
            f"    engine.generate([SYSTEM_PROMPT + list(q) for q in {_QUESTIONS}], 24)",
            found.cause if found else failure.cause,
        )
    passed(f"served like dense decoding, through {len(engine.stats().preemptions)} preemptions")
