"""One thread at a time inside an engine: a call from a second thread is refused, not queued.

The engine's state (its queues, the manager's block tables, the pool) is changed by many steps
inside each call, so a second thread that cut in between them, say an `abort` between planning
and the forward pass, would leave the first thread's clean-up half done. `one_thread_at_a_time`
makes each public call that changes the engine hold the engine's lock; a call from another
thread while it is held raises `EngineBusy` before it changes anything. The lock is re-entrant
(`generate` calls `run`, which calls `step`) and never waited on, so a single-threaded caller
pays one uncontended acquire and release per call.

Re-entrance from the thread inside a step (a model, attention or policy calling back) is
refused too: `a_step` marks the engine as inside a step, and `not_inside_a_step` makes `run`,
`step` and `generate` raise `EngineBusy` there before they change anything, since a step
started inside another would plan over the first one's half-built batch. `add_request` (it only
queues) and `abort` of a request the step is not computing stay allowed.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from paged_kv.errors import EngineBusy

P = ParamSpec("P")
R = TypeVar("R")


class HoldsALock(Protocol):
    _one_thread: threading.RLock


S = TypeVar("S", bound=HoldsALock)


class Steps(Protocol):
    _inside_step: bool


T = TypeVar("T", bound=Steps)


def one_thread_at_a_time(
    method: Callable[Concatenate[S, P], R],
) -> Callable[Concatenate[S, P], R]:
    """`method` runs holding `self._one_thread` (an `RLock`); `EngineBusy` if another thread
    holds it."""

    @functools.wraps(method)
    def guarded(self: S, *args: P.args, **kwargs: P.kwargs) -> R:
        lock = self._one_thread
        if not lock.acquire(False):  # never waits (positional: half the cost of blocking=)
            raise EngineBusy(
                f"{type(self).__name__}.{method.__name__}: another thread is inside this "
                "engine; use an engine from one thread at a time (one engine per thread, or "
                "send requests to the thread that runs it through a queue)."
            )
        try:
            return method(self, *args, **kwargs)
        finally:
            lock.release()

    return guarded


def refuse_inside_a_step(engine: Steps, call: str) -> None:
    """`EngineBusy` if `engine` is inside a step (`call` is called back from its parts)."""
    if engine._inside_step:
        raise EngineBusy(
            f"{type(engine).__name__}.{call} was called from inside a step (by the model, "
            "attention, a policy or a scheduler the step is running); a step cannot start "
            "another. Call it after the step returns (add_request works inside a step)."
        )


def not_inside_a_step(method: Callable[Concatenate[T, P], R]) -> Callable[Concatenate[T, P], R]:
    """`method` raises `EngineBusy` when called from inside a step, before it runs."""

    @functools.wraps(method)
    def guarded(self: T, *args: P.args, **kwargs: P.kwargs) -> R:
        refuse_inside_a_step(self, method.__name__)
        return method(self, *args, **kwargs)

    return guarded


def a_step(method: Callable[Concatenate[T, P], R]) -> Callable[Concatenate[T, P], R]:
    """`method` is a step: refused inside another, and marks `self` as inside one while it
    runs."""

    @functools.wraps(method)
    def guarded(self: T, *args: P.args, **kwargs: P.kwargs) -> R:
        refuse_inside_a_step(self, method.__name__)
        self._inside_step = True
        try:
            return method(self, *args, **kwargs)
        finally:
            self._inside_step = False

    return guarded
