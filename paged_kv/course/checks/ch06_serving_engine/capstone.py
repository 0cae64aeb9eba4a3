"""The capstone: the engine on every part the learner built generates the dense tokens, and a
wrong token or an error names the part at fault by swapping each for the library's."""

from __future__ import annotations

import functools
import random
from pathlib import Path
from typing import Any

from paged_kv.course.checks.ch06_serving_engine.workloads import SYSTEM_PROMPT, sensitive_model
from paged_kv.course.checks.failures import (
    CheckFailed,
    ExerciseNotDone,
    exercise,
    learner_error,
    passed,
    stub_of,
)
from paged_kv.course.learner_manager import learner_manager
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import greedy_dense
from paged_kv.serving.scheduler import SamplingParams, Scheduler

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
        manager_factory=functools.partial(learner_manager, **hooks),
    )


def _capstone_prompts() -> list[tuple[list[int], str | None]]:
    rng = random.Random(6)
    systems = [SYSTEM_PROMPT, list(b"SYSTEM: answer about KV caches, briefly.\n")]
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
                f"token right: {part.what} is at fault. Run the checks of chapter "
                f"{part.chapter}'s exercise notebook ({Path(part.notebook).name}) "
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
