"""Chapter 06 checks: a learner's scheduler admits and preempts like the library's, and the
capstone's engine on it (and on every part the learner built) generates the cache-free greedy
tokens. A scenario, or a random workload, is the Python that sets it up (the replay), run with
the learner's class and with `Scheduler`, then compared on all a call may change (`_SEEN`). A
wrong token, or an error in the run, names the part at fault (`_served`)."""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from paged_kv.cache.block_table import blocks_needed
from paged_kv.cache.manager import KVCacheManager
from paged_kv.course import parts as saved
from paged_kv.course.checks import causes, failures
from paged_kv.course.checks.failures import CheckFailed, exercise, passed, plain
from paged_kv.course.checks.harness import Trial, fixed, quiet, search
from paged_kv.course.learner_manager import learner_manager
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import ModelConfig, TinyLM, greedy_dense
from paged_kv.serving.scheduler import Request, SamplingParams, Scheduler, StepPlan

__all__ = ["check_admission", "check_capstone", "check_preemption", "check_serves_like_dense"]


class _RecordingManager(KVCacheManager):
    """A KVCacheManager that logs the add_sequence and free_sequence calls made to it (`calls`)."""

    def add_sequence(self, seq_id: Any, *args: Any, **kwargs: Any) -> Any:
        vars(self).setdefault("calls", []).append(("add", seq_id))
        return super().add_sequence(seq_id, *args, **kwargs)

    def free_sequence(self, seq_id: Any) -> None:
        vars(self).setdefault("calls", []).append(("free", seq_id))
        super().free_sequence(seq_id)


@functools.cache
def small_model() -> TinyLM:
    return TinyLM(ModelConfig(hidden_size=32, intermediate_size=64, num_layers=1), seed=0)


# the names a scene's code runs with: its managers log their add and free calls
_NAMES = {f.__name__: f for f in (Request, SamplingParams, StepPlan, small_model)} | {
    "Scheduler": Scheduler,
    "KVCacheManager": _RecordingManager,
    "Engine": functools.partial(Engine, manager_factory=_RecordingManager),
}
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


def _scenes(code: str, cls: type[Scheduler], trial: Trial) -> list[dict[str, Any]]:
    """The names after `code` ran with the learner's class and with the library's (the setup
    calls `Scheduler` itself, so the learner's is renamed if it has that name)."""
    name = cls.__name__ if cls.__name__ != "Scheduler" else "TheScheduler"
    for line in code.replace("{cls}", name).splitlines():
        trial.note(line)
    scenes = []
    for scheduler_cls in (cls, Scheduler):
        scene = {**_NAMES, "cls": scheduler_cls}
        exec(code.replace("{cls}", "cls"), scene)  # the replay's code, run
        scene["manager"].calls = []  # the calls after the setup
        queues = [*scene["scheduler"].waiting, *scene["scheduler"].running]
        scenes.append(scene | {"requests": sorted(queues, key=lambda r: r.request_id)})
    return scenes


def _compare(mine: dict[str, Any], theirs: dict[str, Any], hint: str, trial: Trial) -> None:
    for expr in _SEEN:
        trial.expect(expr, eval(expr, mine), eval(expr, theirs), hint)


def _scenario(cls: type[Scheduler], code: str, line: str, hint: str, trial: Trial) -> None:
    """Run `line` after `code` with the learner's class and the library's; compare."""
    mine, theirs = _scenes(code, cls, trial)
    trial.same(line, lambda: eval(line, mine), lambda: eval(line, theirs), hint=hint)
    _compare(mine, theirs, hint, trial)


def _workload(rng: random.Random) -> list[Any]:
    """The engine's sizes (tight budgets), then 6 prompts that may share a prefix."""
    shared = [rng.randrange(256) for _ in range(rng.choice([0, 12, 20]))]
    prompts = [shared + [rng.randrange(256) for _ in range(rng.randrange(1, 20))] for _ in range(6)]
    size = rng.choice([1, 4, 8])
    blocks = max(blocks_needed(len(p) + 6, size) for p in prompts) + rng.randrange(0, 4)
    return [(blocks, size, rng.choice([16, 32, 64]), rng.choice([2, 4, 8])), *prompts]


def _serve_both(cls: type[Scheduler], what: str, ops: list[Any], trial: Trial) -> None:
    """Workload `ops` on an engine with `cls` and one with `Scheduler`, compared step by step
    (each request generates 6 tokens)."""
    (blocks, size, budget, running), *prompts = ops
    trial.note("from paged_kv.course.checks.ch06_serving_engine import Engine, SamplingParams")
    trial.note("from paged_kv.course.checks.ch06_serving_engine import small_model")
    code = (
        f"engine = Engine(small_model(), num_blocks={blocks}, block_size={size}, "
        f"max_batch_tokens={budget}, max_running={running}, scheduler={{cls}})\n"
        + "".join(f"engine.add_request({p}, SamplingParams(6))\n" for p in prompts)
        + "scheduler, manager = engine.scheduler, engine.manager"
    )
    mine, theirs = _scenes(code, cls, trial)
    trial.note("")  # the steps so far, rewritten at each step
    steps = 0
    while theirs["engine"].has_unfinished():
        steps += 1
        trial.lines[-1] = f"for _ in range({steps}): plan = engine.step()"
        theirs["plan"] = theirs["engine"].step()
        mine["plan"] = trial.read(trial.lines[-1], mine["engine"].step)
        _compare(mine, theirs, f"Your {what} differs from the library's", trial)


def _check(cls: type[Scheduler], scenarios: list[tuple[str, str]], line: str, what: str) -> None:
    """The fixed scenarios, each running `line`, then random workloads step by step."""
    for code, hint in scenarios:
        fixed(functools.partial(_scenario, cls, code, line, hint))
    with one_thread():
        play = functools.partial(_serve_both, cls, what)
        search(play, _workload, trials=6, seed=0, what=f"check_{what}", max_runs=30)


def _admission(
    budget: int, prompts: str, blocks: int = 12, running: int = 4, cached: str = ""
) -> str:
    """A scenario's code: requests `prompts` waiting for a step of `budget` tokens."""
    return (
        f"manager = KVCacheManager({blocks}, 4)\n{cached}"
        f"scheduler = {{cls}}(manager, max_batch_tokens={budget}, max_running={running})\n"
        f"requests = [Request(i, prompt, SamplingParams()) for i, prompt in enumerate({prompts})]\n"
        f"for r in requests:\n    scheduler.add(r)\nplan = StepPlan(0, {budget})"
    )


def _running(budget: int, prompts: str, new: str, **kwargs: Any) -> str:
    """A scenario's code: the library admits `prompts`, each samples a token, `new` arrives."""
    return _admission(budget, prompts, blocks=16, **kwargs) + (
        "\nScheduler.admit_waiting(scheduler, plan)\nfor r in scheduler.running:\n"
        "    r.record_sample(9)  # sampled, pending\n"
        f"scheduler.add(Request(9, {new}, SamplingParams()))\nplan = StepPlan(1, {budget})\n"
    )


_CACHED = (
    'manager.add_sequence("earlier", list(range(100, 112)) + [1])\n'
    'manager.free_sequence("earlier")  # its 3 full blocks stay cached\n'
)
_ADMISSIONS = [
    (
        _admission(
            24,
            "[list(range(11)), list(range(100, 112)) + [7, 8], list(range(50, 61)), [5]]",
            cached=_CACHED,
        ),
        "A request costs its tokens minus its prefix hits (manager.num_prefix_hit_tokens); admit "
        "in order while the cost fits plan.budget_left (an equal cost fits), and stop at the first "
        "that does not; add_sequence(request_id, request.admission_sequence()) before changing "
        "its status or the queues; its chunk is ScheduledChunk(request, request.num_cached_tokens, "
        "the rest, True)",
    ),
    (
        _running(10, "[[1, 2], [11, 12]]", "list(range(20, 29))")
        + "Scheduler.schedule_running(scheduler, plan)  # requests 0 and 1 decode: 2 of 10 tokens",
        "plan.budget_left already counts the running requests' decodes, and a step that holds "
        "decodes is not empty: the request waits",
    ),
    (
        _admission(8, "[list(range(20))]"),
        "A request bigger than the whole budget runs alone in an empty step",
    ),
    (_admission(64, "[[0], [1], [2]]", running=2), "At most max_running requests run at once"),
    (
        _admission(64, "[list(range(20)), [7]]", blocks=3),
        "When add_sequence raises OutOfBlocks nothing changed: stop admitting, the request keeps "
        "waiting (and those behind it)",
    ),
    (
        _admission(
            64, "[[4, 5, 6]]", cached="manager.add_sequence(0, [1, 2, 3])  # id 0 is taken\n"
        ),
        "Catch only OutOfBlocks: any other error is a bug that must come through",
    ),
]


@exercise(1, "admission")
def check_admission(scheduler_cls: type[Scheduler]) -> None:
    """`scheduler_cls.admit_waiting` admits in order within the token, block and running caps."""
    _check(scheduler_cls, _ADMISSIONS, "scheduler.admit_waiting(plan)", "admission")
    passed("admits like the library's scheduler, step by step")


_PREEMPT = (
    _running(
        64, "[list(range(9)), list(range(100, 109)), list(range(20, 29))]", "[3, 4]", cached=_CACHED
    )
    + "victim = scheduler.running[1]  # not the newest"
)
_PREEMPTIONS = [
    (
        _PREEMPT,
        "Preempt the request given: free its sequence, take it out of running, status WAITING, "
        "num_preemptions + 1, the same object (its tokens and its pending one) at the head of "
        "waiting, and Preemption(plan.step, its id, request.num_tokens, reason) in plan.preempted",
    ),
    (
        _PREEMPT + "\nmanager.free_sequence(1)  # behind the scheduler's back",
        "Catch nothing in preempt: an error there is a bug in the scheduler's state",
    ),
]


@exercise(2, "preemption")
def check_preemption(scheduler_cls: type[Scheduler]) -> None:
    """`scheduler_cls.preempt` frees the victim's blocks and queues it first for recompute."""
    _check(scheduler_cls, _PREEMPTIONS, "scheduler.preempt(victim, plan, 'a test')", "preemption")
    passed("preempts like the library's scheduler, step by step")


_DENSE = (
    "An admitted request computes every token from its prefix hits on; a preempted one "
    "keeps its output, recomputed with its prompt"
)


def _method_at_fault(scheduler_cls: type[Scheduler], cause: str) -> tuple[str, str]:
    """Exercise 1's and 2's checks on each method of `scheduler_cls` alone (the other one the
    library's): the first that fails names the cause, else `cause` stays; then the replay."""
    name = scheduler_cls.__name__
    replay = "Replay it:\n    from paged_kv.course.checks.ch06_serving_engine import serve\n"
    replay += f"    serve({{}}, {name})"
    for check, method in ((check_admission, "admit_waiting"), (check_preemption, "preempt")):
        library = {m: getattr(Scheduler, m) for m in ("admit_waiting", "preempt") if m != method}
        try:
            check(type(name, (scheduler_cls,), library))
        except CheckFailed as failure:
            return failure.cause, f"The cause is in your {method}: {failure}\n{replay}"
        except Exception:  # a diagnosis only: the failure itself is reported
            continue
    return cause, replay


@exercise(3, "both together")
def check_serves_like_dense(scheduler_cls: type[Scheduler]) -> None:
    """The capstone's engine on the library's parts and `scheduler_cls`, short of blocks,
    generates the cache-free greedy tokens. A failure runs exercises 1 and 2's checks on each
    method to name the one at fault."""
    diagnose = functools.partial(_method_at_fault, scheduler_cls)
    with one_thread():
        engine = _served({}, scheduler_cls, diagnose, _DENSE)
    passed(f"served like dense decoding, through {engine.stats().num_preemptions} preemptions")


# -- the capstone: the engine on every part ------------------------------------------------------

SYSTEM_PROMPT = list(b"You are a terse assistant. Reply in one line.\n")
_MANAGER_PARTS = ("pool", "block_hasher", "prefix_lookup", "allocate_table")


@contextmanager
def one_thread() -> Iterator[None]:
    """Run the tiny models on one thread: they gain nothing from more, and on a loaded machine
    torch's threads wait on each other (a check's engine steps ran 50x slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@functools.cache
def sensitive_model() -> TinyLM:
    """TinyLM(seed=0) with sharper attention (queries and keys x3) that weighs more (output
    projection x4): changing any one token of a prompt changes what it generates."""
    model = TinyLM(seed=0)
    with torch.no_grad():
        for layer in model.layers:
            for projection, scale in (("q_proj", 3), ("k_proj", 3), ("o_proj", 4)):
                getattr(layer.self_attn, projection).weight *= scale
    return model


def _requests() -> list[tuple[list[int], str | None]]:
    """Ten (prompt, tenant salt): two system prompts, three questions, two tenants."""
    rng, questions = random.Random(6), [b"Why pages?", b"What is a block?", b"Evict what?"]
    systems = [SYSTEM_PROMPT, list(b"SYSTEM: answer about KV caches, briefly.\n")]
    prompts = [systems[i % 2] + list(rng.choice(questions)) + [48 + i] for i in range(10)]
    return [(prompt, "tenant-b" if i % 3 == 2 else None) for i, prompt in enumerate(prompts)]


def serve(parts: dict[str, Any], scheduler_cls: type[Scheduler]) -> Engine:
    """The engine on `parts` (the library's for those missing) and `scheduler_cls`, after
    serving the ten requests, 10 tokens each, in a cache small enough to evict and preempt."""
    hooks = {name: parts[name] for name in _MANAGER_PARTS if name in parts}
    engine = Engine(
        sensitive_model(),
        num_blocks=30,
        block_size=4,
        max_batch_tokens=128,
        max_running=6,
        eviction=parts.get("eviction") or "lru",
        scheduler=scheduler_cls,
        attention=parts.get("attention"),
        manager_factory=functools.partial(learner_manager, **hooks),
    )
    for prompt, salt in _requests():
        engine.add_request(prompt, SamplingParams(10), salt=salt)
    engine.run()
    return engine


@functools.cache
def _dense() -> list[list[int]]:
    return [greedy_dense(sensitive_model(), prompt, 10) for prompt, _ in _requests()]


def wrong_tokens(engine: Engine, hint: str = "") -> str | None:
    """What the first request whose tokens are not the cache-free greedy ones got, or None."""
    for i, (request_id, want) in enumerate(zip(engine.requests, _dense(), strict=True)):
        got = engine.completion(request_id).token_ids
        if want != plain(got):
            line = f"request {i}'s tokens"
            return causes.say(causes.WRONG_RESULT, hint, line=line, want=want, got=got)
    return None


_Diagnose = Callable[[str], tuple[str, str]]  # the (cause, why) of a failed run from its cause


def _served(parts: dict[str, Any], cls: type[Scheduler], diagnose: _Diagnose, hint: str) -> Engine:
    """The engine after the run; wrong tokens, or an error that is neither a stub's nor a
    hook's check's (those come through as they are), fail with `diagnose(cause)`'s verdict."""
    try:
        engine = serve(parts, cls)
    except Exception as exc:
        hooked = str(exc).startswith(tuple(f"{n} " for n in parts))
        if hooked or isinstance(exc, NotImplementedError):
            raise  # a stub (not done yet), or a hook's check, whose message says what is wrong
        error = failures.learner_error(exc, doing="the engine run")
        wrong, cause = str(error), getattr(error, "cause", causes.RAISED)
    else:
        wrong, cause = wrong_tokens(engine, hint), causes.WRONG_RESULT
        if wrong is None:
            return engine
    with quiet():
        cause, why = diagnose(cause)
    raise CheckFailed(f"{wrong}\n{why}", cause)


@exercise(None, "capstone")
def check_capstone(scheduler_cls: type[Scheduler], parts: dict[str, Any] | None = None) -> None:
    """The engine on your parts: your pool (01), eviction policy (03), chained hash, prefix
    lookup and all-or-nothing add (04), decode attention (05) and scheduler (06) serve ten
    requests sharing system prompts, two tenants, in a cache small enough to evict and preempt,
    and generate exactly the cache-free greedy tokens. `parts` defaults to the saved ones
    (`paged_kv.course.parts.load_all()`); a missing part (not saved, saved with a stub still in
    it, or in a file that does not load) is the library's, and the check says why and where it
    looked."""
    if parts is None:
        found, looked = saved.load_all(), [f"({saved.searched()})"]
    else:
        mine = {n: p for n, p in parts.items() if p is not None}
        found = {n: (mine.get(n), "yours" if n in mine else "not passed") for n in saved.PARTS}
        looked = []
    parts = {name: part for name, (part, _) in found.items() if part is not None}
    with one_thread():
        stats = _served(parts, scheduler_cls, lambda _: _culprits(parts, scheduler_cls), "").stats()
    lines = []
    for name, part in saved.PARTS.items():
        obj, why = found[name]
        whose = "" if obj is not None else "the library's: "
        lines.append(f"  {part.what:45} {whose}{why}")
    lines.append(f"  {'your scheduler':45} {scheduler_cls.__name__}, from this notebook")
    lines += looked if len(parts) < len(saved.PARTS) else []
    print("The engine ran on:", *lines, sep="\n")
    print(
        f"{stats.requests} requests, {stats.generated_tokens} tokens, all equal to cache-free "
        f"greedy decoding; {stats.prefill_tokens_saved} prompt tokens were prefix hits, "
        f"{stats.evictions} blocks evicted, {stats.num_preemptions} preemptions."
    )
    passed("the engine on your parts generates the dense tokens")


def _culprits(parts: dict[str, Any], scheduler_cls: type[Scheduler]) -> tuple[str, str]:
    """(cause, why): serve with each of the learner's parts swapped for the library's; the
    parts without which the tokens come out right are at fault."""

    def right_without(*names: str) -> bool:
        try:
            kept = {n: p for n, p in parts.items() if n not in names}
            return wrong_tokens(serve(kept, scheduler_cls)) is None
        except Exception:  # a diagnosis: an error only says "not right"
            return False

    at_fault = [(name, saved.PARTS[name]) for name in parts if right_without(name)]
    if at_fault:
        return causes.PART_AT_FAULT, "\n".join(
            f"With the library's {name} instead of {part.what}, the engine serves every token "
            f"right: {part.what} is at fault. Run the checks of chapter {part.chapter}'s exercise "
            f"notebook ({Path(part.notebook).name}) again, and look at what they do not try."
            for name, part in at_fault
        )
    if not right_without(*parts):
        return causes.SCHEDULER_AT_FAULT, (
            f"With the library's parts and your {scheduler_cls.__name__}, the run still goes "
            "wrong: your scheduler is the cause (run this notebook's checks again)."
        )
    return causes.PARTS_DISAGREE, "No single part is the cause; two of your parts disagree."
