"""The capstone: the engine on every part the learner built generates the dense tokens, and a
wrong token or an error names the part at fault by swapping each for the library's."""

from __future__ import annotations

import functools
import random
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from paged_kv.course.checks import causes
from paged_kv.course.checks.failures import (
    CheckFailed,
    ExerciseNotDone,
    exercise,
    learner_error,
    passed,
    stub_of,
)
from paged_kv.course.checks.harness import quiet
from paged_kv.course.learner_manager import learner_manager
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import TinyLM, greedy_dense
from paged_kv.serving.scheduler import SamplingParams, Scheduler

SYSTEM_PROMPT = list(b"You are a terse assistant. Reply in one line.\n")
_MANAGER_PARTS = ("pool", "block_hasher", "prefix_lookup", "allocate_table")
_NOT_YOURS = ("paged_kv.", "builtins", "abc")


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
            attention: Any = layer.self_attn
            attention.q_proj.weight *= 3
            attention.k_proj.weight *= 3
            attention.o_proj.weight *= 4
    return model


def _prompts() -> list[tuple[list[int], str | None]]:
    rng, questions = random.Random(6), [b"Why pages?", b"What is a block?", b"Evict what?"]
    systems = [SYSTEM_PROMPT, list(b"SYSTEM: answer about KV caches, briefly.\n")]
    return [(systems[i % 2] + list(rng.choice(questions)) + [48 + i],
             "tenant-b" if i % 3 == 2 else None) for i in range(10)]  # fmt: skip


def _serve(parts: dict[str, Any], scheduler_cls: type[Scheduler]) -> tuple[Engine, list[Any]]:
    hooks = {name: parts[name] for name in _MANAGER_PARTS if parts.get(name) is not None}
    engine = Engine(sensitive_model(), num_blocks=30, block_size=4, max_batch_tokens=128,
                    max_running=6, eviction=parts.get("eviction") or "lru", scheduler=scheduler_cls,
                    attention=parts.get("attention"),
                    manager_factory=functools.partial(learner_manager, **hooks))  # fmt: skip
    ids = [engine.add_request(p, SamplingParams(10), salt=salt) for p, salt in _prompts()]
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

    if parts is None:
        found = saved.load_all()
        parts = {name: obj for name, (obj, _) in found.items() if obj is not None}
        notes = {name: note for name, (_, note) in found.items()}
    else:
        notes = {n: "yours" if parts.get(n) is not None else "the library's" for n in saved.PARTS}
    with one_thread():
        want = [greedy_dense(sensitive_model(), prompt, 10) for prompt, _ in _prompts()]
        engine, got = _run_parts(parts, scheduler_cls, want)
    if got != want:
        first = next(i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
        line = f"request {first}'s tokens"
        message = causes.say(causes.WRONG_RESULT, "", line=line, want=want[first], got=got[first])
        with one_thread():
            cause, why = _culprits(parts, scheduler_cls, want)
        raise CheckFailed(f"{message}\n{why}", cause)
    lines = [f"  {saved.PARTS[name].what:45} {notes[name]}" for name in saved.PARTS]
    lines.append(f"  {'your scheduler':45} {scheduler_cls.__name__}, from this notebook")
    stats = engine.stats()
    print("The engine ran on:\n" + "\n".join(lines))
    print(
        f"{stats.requests} requests, {stats.generated_tokens} tokens, all equal to cache-free "
        f"greedy decoding; {stats.prefill_tokens_saved} prompt tokens were prefix hits, "
        f"{stats.evictions} blocks evicted, {len(stats.preemptions)} preemptions."
    )
    passed("the engine on your parts generates the dense tokens")


def _run_parts(
    parts: dict[str, Any], scheduler_cls: type[Scheduler], want: list[Any]
) -> tuple[Engine, list[Any]]:
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
        if culprit:
            raise CheckFailed(f"{culprit}{text}", getattr(error, "cause", causes.RAISED)) from None
        cause, why = _culprits(parts, scheduler_cls, want)  # raised in the library
        raise CheckFailed(f"{text}\n{why}", cause) from None


def _part_code(obj: Any) -> set[Any]:
    """The code objects of a part: a function's, or its classes' methods (not the library's)."""
    if hasattr(obj, "__code__"):
        return {obj.__code__}
    ours = [k for k in getattr(obj, "__mro__", ()) if not k.__module__.startswith(_NOT_YOURS)]
    values = [getattr(getattr(v, "__func__", v), "fget", v) for k in ours for v in vars(k).values()]
    return {v.__code__ for v in values if hasattr(v, "__code__")}


def _part_of(exc: BaseException, parts: dict[str, Any]) -> str:
    """'your pool (chapter 01): ' when the innermost part on the stack raised `exc`."""
    from paged_kv.course import parts as saved

    codes = [frame.f_code for frame, _ in traceback.walk_tb(exc.__traceback__)]
    for code in reversed(codes):
        for name, part in saved.PARTS.items():
            if parts.get(name) is not None and code in _part_code(parts[name]):
                return f"{part.what} (chapter {part.chapter}): "
    named = [p for n, p in saved.PARTS.items() if str(exc).startswith(n + " ")]  # a hook's check
    return f"{named[0].what} (chapter {named[0].chapter}): " if named else ""


def _served(parts: dict[str, Any], scheduler_cls: type[Scheduler]) -> list[Any] | None:
    """The tokens of a run on `parts`, or None if it raised (a diagnosis: nothing reported)."""
    try:
        with quiet():
            return _serve(parts, scheduler_cls)[1]
    except Exception:
        return None


def _culprits(
    parts: dict[str, Any], scheduler_cls: type[Scheduler], want: list[Any]
) -> tuple[str, str]:
    """(cause, why): serve with each of the learner's parts swapped for the library's; the
    parts without which the tokens come out right are at fault."""
    from paged_kv.course import parts as saved

    mine = [n for n in saved.PARTS if parts.get(n) is not None]
    at_fault = [
        (n, saved.PARTS[n]) for n in mine if _served({**parts, n: None}, scheduler_cls) == want
    ]
    if at_fault:
        return causes.PART_AT_FAULT, "\n".join(
            f"With the library's {name} instead of {part.what}, the engine serves every token "
            f"right: {part.what} is at fault. Run the checks of chapter {part.chapter}'s exercise "
            f"notebook ({Path(part.notebook).name}) again, and look at what they do not try."
            for name, part in at_fault
        )
    if _served({}, scheduler_cls) != want:
        return causes.SCHEDULER_AT_FAULT, (
            f"With the library's parts and your {scheduler_cls.__name__}, the tokens are still "
            "wrong: your scheduler is the cause (run this notebook's checks again)."
        )
    return causes.PARTS_DISAGREE, "No single part is the cause; two of your parts disagree."
