"""The capstone: the engine on every part the learner built generates the dense tokens, and a
wrong token, or an error the library raises, names the part at fault by swapping each part for
the library's (an error in the learner's own code says where it was raised)."""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from paged_kv.course import parts as saved
from paged_kv.course.checks import causes, failures
from paged_kv.course.checks.failures import CheckFailed, exercise, passed
from paged_kv.course.checks.harness import quiet
from paged_kv.course.learner_manager import learner_manager
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import TinyLM, greedy_dense
from paged_kv.serving.scheduler import SamplingParams, Scheduler

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
    return [(systems[i % 2] + list(rng.choice(questions)) + [48 + i],
             "tenant-b" if i % 3 == 2 else None) for i in range(10)]  # fmt: skip


def serve(parts: dict[str, Any], scheduler_cls: type[Scheduler]) -> Engine:
    """The engine on `parts` (the library's for those missing) and `scheduler_cls`, after
    serving the ten requests, 10 tokens each, in a cache small enough to evict and preempt."""
    hooks = {name: parts[name] for name in _MANAGER_PARTS if name in parts}
    engine = Engine(sensitive_model(), num_blocks=30, block_size=4, max_batch_tokens=128,
                    max_running=6, eviction=parts.get("eviction") or "lru", scheduler=scheduler_cls,
                    attention=parts.get("attention"),
                    manager_factory=functools.partial(learner_manager, **hooks))  # fmt: skip
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
        if got != want:
            line = f"request {i}'s tokens"
            return causes.say(causes.WRONG_RESULT, hint, line=line, want=want, got=got)
    return None


@exercise(None, "capstone")
def check_capstone(scheduler_cls: type[Scheduler], parts: dict[str, Any] | None = None) -> None:
    """The engine on your parts: your pool (01), eviction policy (03), chained hash, prefix
    lookup and all-or-nothing add (04), decode attention (05) and scheduler (06) serve ten
    requests sharing system prompts, two tenants, in a cache small enough to evict and preempt,
    and generate exactly the cache-free greedy tokens. `parts` defaults to the saved ones
    (`paged_kv.course.parts.load_all()`); a missing part is the library's, and says so."""
    if parts is None:
        found = saved.load_all()
    else:
        mine = {n: p for n, p in parts.items() if p is not None}
        found = {n: (mine.get(n), "yours" if n in mine else "the library's") for n in saved.PARTS}
    parts = {name: part for name, (part, _) in found.items() if part is not None}
    with one_thread():
        stats = _served(parts, scheduler_cls).stats()
    lines = [f"  {part.what:45} {found[name][1]}" for name, part in saved.PARTS.items()]
    lines.append(f"  {'your scheduler':45} {scheduler_cls.__name__}, from this notebook")
    print("The engine ran on:", *lines, sep="\n")
    print(
        f"{stats.requests} requests, {stats.generated_tokens} tokens, all equal to cache-free "
        f"greedy decoding; {stats.prefill_tokens_saved} prompt tokens were prefix hits, "
        f"{stats.evictions} blocks evicted, {len(stats.preemptions)} preemptions."
    )
    passed("the engine on your parts generates the dense tokens")


def _served(parts: dict[str, Any], scheduler_cls: type[Scheduler]) -> Engine:
    """The engine after the run; wrong tokens, or an error the library raised that no hook's
    check explains, fail naming the part at fault (`_culprits`)."""
    try:
        engine = serve(parts, scheduler_cls)
        wrong = wrong_tokens(engine)
        if wrong is None:
            return engine
    except Exception as exc:
        if failures.where_raised(exc) or str(exc).startswith(tuple(f"{n} " for n in parts)):
            raise  # the learner's code raised (the message says where), or a hook's check did
        wrong = str(failures.learner_error(exc, "Capstone", doing="the engine run"))
    cause, why = _culprits(parts, scheduler_cls)
    raise CheckFailed(f"{wrong}\n{why}", cause)


def _culprits(parts: dict[str, Any], scheduler_cls: type[Scheduler]) -> tuple[str, str]:
    """(cause, why): serve with each of the learner's parts swapped for the library's; the
    parts without which the tokens come out right are at fault."""

    def right_without(*names: str) -> bool:
        try:
            with quiet():
                kept = {n: p for n, p in parts.items() if n not in names}
                return wrong_tokens(serve(kept, scheduler_cls)) is None
        except Exception:  # a diagnosis: an error only says "not right"
            return False

    at_fault = [saved.PARTS[name] for name in parts if right_without(name)]
    if at_fault:
        return causes.PART_AT_FAULT, "\n".join(
            f"With the library's {part.name} instead of {part.what}, the engine serves every token "
            f"right: {part.what} is at fault. Run the checks of chapter {part.chapter}'s exercise "
            f"notebook ({Path(part.notebook).name}) again, and look at what they do not try."
            for part in at_fault
        )
    if not right_without(*parts):
        return causes.SCHEDULER_AT_FAULT, (
            f"With the library's parts and your {scheduler_cls.__name__}, the tokens are still "
            "wrong: your scheduler is the cause (run this notebook's checks again)."
        )
    return causes.PARTS_DISAGREE, "No single part is the cause; two of your parts disagree."
