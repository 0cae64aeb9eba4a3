"""Chapter 06 checks: a learner's scheduler admits, preempts and serves like the library's,
and the capstone: the engine on every part the learner built generates the dense tokens.

Engine workloads are replayable: `workload(scheduler_cls, seed)` rebuilds the engine and the
prompts a failing message names.
"""

from __future__ import annotations

import functools
import random
from typing import Any

import torch

from paged_kv.cache.block_table import blocks_needed as reference_blocks_needed
from paged_kv.cache.manager import KVCacheManager
from paged_kv.course.checks.support import (
    CheckFailed,
    ExerciseNotDone,
    call,
    exercise,
    expect,
    learner_error,
    passed,
    stub_of,
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


def _engine_trace(scheduler_cls: type[Scheduler], seed: int) -> tuple[list[Any], list[list[int]]]:
    """Serve workload `seed`; return what every step computed and preempted, and the tokens."""
    engine, prompts = workload(scheduler_cls, seed)
    ids = [engine.add_request(p, SamplingParams(6)) for p in prompts]
    steps: list[Any] = []
    while engine.has_unfinished() and len(steps) < 500:
        plan = call(f"step {len(steps)} of workload {seed}", engine.step)
        computed = [(c.request.request_id, c.start, c.num_tokens, c.admitted) for c in plan.chunks]
        steps.append((computed, [(p.request_id, p.num_tokens) for p in plan.preempted]))
    return steps, [engine.requests[i].output for i in ids]


def _replay_hint(name: str, seed: int, steps: int) -> str:
    return (
        "\nReplay it:\n"
        "    from paged_kv.course.checks.ch06_serving_engine import workload\n"
        f"    engine, prompts = workload({name}, seed={seed})\n"
        "    for p in prompts:\n"
        "        engine.add_request(p, SamplingParams(6))\n"
        f"    for _ in range({steps}):\n"
        "        print(engine.step().describe())  # request:tokens, * for an admission"
    )


@functools.cache
def _library_trace(seed: int) -> tuple[list[Any], list[list[int]]]:
    return _engine_trace(Scheduler, seed)


def _compare_traces(scheduler_cls: type[Scheduler], what: str) -> None:
    name = scheduler_cls.__name__
    for seed in range(6):
        theirs, their_tokens = _engine_trace(scheduler_cls, seed)
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
    _compare_traces(scheduler_cls, "admission")
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
    _compare_traces(scheduler_cls, "preemption")
    passed("preempts like the library's scheduler, step by step")


_SYSTEM = list(b"You are a terse assistant. Reply in one line.\n")
_QUESTIONS = [b"What is paging?", b"Why blocks?", b"Who evicts?"]


@exercise(3, "both together")
def check_serves_like_dense(scheduler_cls: type[Scheduler]) -> None:
    """An engine with `scheduler_cls`, short of blocks, generates the cache-free greedy tokens."""
    model = sensitive_model()
    prompts = [_SYSTEM + list(q) for q in _QUESTIONS]
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
            "    from paged_kv.course.checks.ch06_serving_engine import sensitive_model\n"
            f"    engine = Engine(sensitive_model(), num_blocks=12, block_size=8, "
            f"scheduler={scheduler_cls.__name__})\n"
            f"    engine.generate([list(b{bytes(_SYSTEM).decode()!r}) + list(q) for q in "
            f"{_QUESTIONS}], 24)",
        )
    passed(f"served like dense decoding, through {preemptions} preemptions")


# -- the capstone -----------------------------------------------------------------------------

_MANAGER_PARTS = ("pool", "block_hasher", "prefix_lookup", "allocate_table")


def _engine_on(parts: dict[str, Any], scheduler_cls: type[Scheduler]) -> Engine:
    hooks = {name: parts[name] for name in _MANAGER_PARTS if parts.get(name) is not None}
    return Engine(
        sensitive_model(),
        num_blocks=30,
        block_size=4,
        max_batch_tokens=128,
        max_running=6,
        eviction=parts.get("eviction") or "lru",
        scheduler=scheduler_cls,
        attention=parts.get("attention"),
        manager_factory=functools.partial(KVCacheManager, **hooks),
    )


def _capstone_prompts() -> list[tuple[list[int], str | None]]:
    rng = random.Random(6)
    systems = [_SYSTEM, list(b"SYSTEM: answer about KV caches, briefly.\n")]
    prompts = []
    for i in range(10):
        question = list(rng.choice([b"Why pages?", b"What is a block?", b"Evict what?"]))
        prompts.append((systems[i % 2] + question + [48 + i], "tenant-b" if i % 3 == 2 else None))
    return prompts


def _serve(parts: dict[str, Any], scheduler_cls: type[Scheduler]) -> tuple[Engine, list[Any]]:
    engine = _engine_on(parts, scheduler_cls)
    ids = [
        engine.add_request(prompt, SamplingParams(10), salt=salt)
        for prompt, salt in _capstone_prompts()
    ]
    engine.run()
    return engine, [engine.completion(i).token_ids for i in ids]


@exercise(None, "capstone")
def check_capstone(scheduler_cls: type[Scheduler], parts: dict[str, Any] | None = None) -> None:
    """The engine on your parts: your pool (01), eviction policy (03), chained hash, prefix
    lookup and all-or-nothing add (04), decode attention (05) and scheduler (06) serve ten
    requests sharing system prompts, two tenants, in a cache small enough to evict and preempt,
    and generate exactly the cache-free greedy tokens. `parts` defaults to the saved ones
    (`paged_kv.course.parts.load_all()`); a missing part is the library's, and says so."""
    from paged_kv.course import parts as saved

    notes: dict[str, str] = {}
    if parts is None:
        found = saved.load_all()
        parts = {name: obj for name, (obj, _) in found.items() if obj is not None}
        notes = {name: note for name, (_, note) in found.items()}
    else:
        notes = {
            name: "yours" if parts.get(name) is not None else "the library's"
            for name in saved.PARTS
        }
    model = sensitive_model()
    want = [greedy_dense(model, prompt, 10) for prompt, _ in _capstone_prompts()]
    engine, got = _run_parts(parts, scheduler_cls)
    if got != want:
        raise CheckFailed(_culprits(parts, scheduler_cls, want, got))
    stats = engine.stats()
    lines = [f"  {saved.PARTS[name].what:45} {notes[name]}" for name in saved.PARTS]
    lines.append(f"  {'your scheduler':45} {scheduler_cls.__name__}, from this notebook")
    print("The engine ran on:\n" + "\n".join(lines))
    print(
        f"{stats.requests} requests, {stats.generated_tokens} tokens, all equal to cache-free "
        f"greedy decoding; {stats.prefill_tokens_saved} prompt tokens were prefix hits, "
        f"{stats.evictions} blocks evicted, {len(stats.preemptions)} preemptions."
    )
    passed("the engine on your parts generates the dense tokens")


def _run_parts(parts: dict[str, Any], scheduler_cls: type[Scheduler]) -> tuple[Engine, Any]:
    try:
        return _serve(parts, scheduler_cls)
    except (CheckFailed, ExerciseNotDone):
        raise
    except Exception as exc:
        culprit = _part_of(exc, parts)
        if isinstance(exc, NotImplementedError):
            raise ExerciseNotDone(f"Capstone is not done yet: {culprit}{stub_of(exc)}") from None
        error = learner_error(exc, "Capstone", doing="the capstone's engine run")
        text = str(error).removeprefix("Capstone: ")
        if not culprit:  # raised in the library: find the part without which all goes well
            causes = _swap_each(parts, scheduler_cls, None)
            if causes:
                raise CheckFailed(f"Capstone: {text}\n" + "\n".join(causes)) from None
        raise CheckFailed(f"Capstone: {culprit}{text}") from None


def _part_code(obj: Any) -> set[Any]:
    """The code objects of a part: a function's, or the methods of a class and its bases
    (except the library's own)."""
    if hasattr(obj, "__code__"):
        return {obj.__code__}
    codes = set()
    for klass in getattr(obj, "__mro__", ()):
        if klass.__module__.startswith(("paged_kv.", "builtins", "abc")):
            continue
        for value in vars(klass).values():
            value = getattr(value, "__func__", value)
            value = getattr(value, "fget", value)
            if hasattr(value, "__code__"):
                codes.add(value.__code__)
    return codes


def _part_of(exc: BaseException, parts: dict[str, Any]) -> str:
    """'your pool (chapter 01): ' when the error was raised in a part's code or by a hook's
    check naming it."""
    from paged_kv.course import parts as saved

    tb = exc.__traceback__
    codes = []
    while tb is not None:
        codes.append(tb.tb_frame.f_code)
        tb = tb.tb_next
    for code in reversed(codes):  # the innermost part on the stack
        for name, part in saved.PARTS.items():
            if parts.get(name) is not None and code in _part_code(parts[name]):
                return f"{part.what} (chapter {part.chapter}): "
    text = str(exc)
    for name, part in saved.PARTS.items():
        if text.startswith(name + " "):
            return f"{part.what} (chapter {part.chapter}): "
    return ""


def _swap_each(
    parts: dict[str, Any], scheduler_cls: type[Scheduler], want: list[Any] | None
) -> list[str]:
    """For each of the learner's parts, serve with the library's instead: the parts without
    which the engine serves (and, given `want`, generates those tokens) are the culprits."""
    from paged_kv.course import parts as saved

    if want is None:
        model = sensitive_model()
        want = [greedy_dense(model, prompt, 10) for prompt, _ in _capstone_prompts()]
    causes = []
    for name in [n for n in saved.PARTS if parts.get(n) is not None]:
        try:
            _, tokens = _serve({**parts, name: None}, scheduler_cls)
        except Exception:
            continue
        if tokens == want:
            part = saved.PARTS[name]
            causes.append(
                f"With the library's {name} instead of {part.what}, the engine serves every "
                f"token right: {part.what} is at fault. Run the checks of {part.notebook} "
                "again, and look at what they do not try."
            )
    return causes


def _culprits(
    parts: dict[str, Any], scheduler_cls: type[Scheduler], want: list[Any], got: list[Any]
) -> str:
    """Which part makes the tokens differ: swap each for the library's and serve again."""
    first = next(i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
    message = (
        f"request {first} generated {got[first]}, but cache-free greedy decoding gives "
        f"{want[first]}."
    )
    causes = _swap_each(parts, scheduler_cls, want)
    if not causes:
        _, tokens = _serve({}, scheduler_cls)
        if tokens != want:
            causes.append(
                f"With the library's parts and your {scheduler_cls.__name__}, the tokens are "
                "still wrong: your scheduler is the cause (run this notebook's checks again)."
            )
        else:
            causes.append("No single part is the cause; two of your parts disagree together.")
    return message + "\n" + "\n".join(causes)
