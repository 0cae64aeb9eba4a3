"""A policy under test, driven the way `BlockPool` drives it: random operation sequences, and
the differential run that compares every victim, size, membership and count with a reference
policy.
"""

from __future__ import annotations

import inspect
import random
from typing import Any

from paged_kv.cache.eviction import EvictionPolicy
from paged_kv.course.checks.failures import CheckFailed, short_repr, where_raised
from paged_kv.course.checks.replay import Failure, Replay

_CALLS = ("touch", "make_evictable", "revive", "evict", "forget", "__len__", "__contains__")


def policy_name(cls: Any) -> str:
    return getattr(getattr(cls, "func", cls), "__name__", "Policy")


def require_policy_class(
    cls: Any, check: str, *, counts: bool = False, window: bool = False
) -> None:
    """`cls` is a class (or a factory) of policies with the calls the pool makes; else say
    what was passed instead, before anything runs."""
    if isinstance(cls, EvictionPolicy) or (not callable(cls) and hasattr(cls, "evict")):
        kind = type(cls).__name__
        raise CheckFailed(
            f"`checks.{check}` takes the class, not an instance: pass `{kind}`, not `{kind}()`"
        )
    if not callable(cls):
        raise CheckFailed(
            f"`checks.{check}` takes your policy's class (such as `BucketLFU`), not "
            f"{short_repr(cls, 60)}"
        )
    target = getattr(cls, "func", cls)
    if not isinstance(target, type):
        return  # a factory function: its policies are checked as they are used
    needed = (*_CALLS, "count") if counts else _CALLS
    missing = [m for m in needed if not callable(getattr(target, m, None))]
    if missing:
        names = ", ".join(f"`{m}`" for m in missing)
        raise CheckFailed(
            f"`{target.__name__}` has no {names}: an eviction policy needs "
            + ", ".join(f"`{m}`" for m in needed)
            + " (subclass the exercise's BucketLFU or `EvictionPolicy`, and pass that class)"
        )
    if window and getattr(cls, "func", None) is None:
        try:
            inspect.signature(target).bind(window=2)
        except TypeError:
            raise CheckFailed(
                f"`{target.__name__}(window=2)` cannot be called: `checks.{check}` takes a class "
                f"whose __init__ takes the window, `def __init__(self, window: int = 4096)` (did "
                "you pass BucketLFU instead of WindowLFU, or name the argument otherwise?)"
            ) from None
        except ValueError:
            pass


def expect_block(r: Replay, victim: Any) -> None:
    """`evict()` returns a block id: a hashable value, never a list or a tuple of them."""
    try:
        hash(victim)
    except TypeError:
        hashable = False
    else:
        hashable = not isinstance(victim, tuple)
    if not hashable or victim is None:
        r.fail(
            "victim not a block id",
            f"`policy.evict()` returned {short_repr(victim, 80)}, not a block id: return the "
            "victim itself (`return block`), not a list, a tuple or None",
        )


def policy_ops(rng: random.Random, num_blocks: int, length: int) -> list[tuple[str, int]]:
    kinds = ["touch", "touch", "touch", "evictable", "revive", "forget", "evict", "evict"]
    return [(rng.choice(kinds), rng.randrange(num_blocks)) for _ in range(length)]


def differential(
    policy_cls: Any, make_reference: Any, args: str, kwargs: dict, window: int | None = None
) -> Any:
    """Apply legal operations to the learner's policy and to the reference; every victim,
    size, membership and count must agree. `window`: the reference ages its counts."""

    def run(ops: list[tuple[str, int]], r: Replay) -> None:
        theirs = r.run(f"policy = {policy_name(policy_cls)}({args})", policy_cls, **kwargs)
        ours = make_reference()
        candidates: set[int] = set()
        history = _History(window)
        for op, b in ops:
            if op == "touch":
                r.run(f"policy.touch({b})", theirs.touch, b)
                ours.touch(b)
                history.touch(b)
            elif op == "evictable" and b not in candidates:
                r.run(f"policy.make_evictable({b})", theirs.make_evictable, b)
                ours.make_evictable(b)
                candidates.add(b)
            elif op == "revive" and b in candidates:
                r.run(f"policy.revive({b})", theirs.revive, b)
                ours.revive(b)
                candidates.discard(b)
            elif op == "forget":
                r.run(f"policy.forget({b})", theirs.forget, b)
                ours.forget(b)
                candidates.discard(b)
                history.gone(b, "forgotten")
            elif op == "evict" and candidates:
                counts = {c: ours.count(c) for c in sorted(candidates)}
                want = ours.evict()
                got = evict_one(r, theirs)
                expect_block(r, got)
                if got != want:
                    r.fail(
                        f"victim {got} instead of {want}",
                        f"`policy.evict()` should evict block {want}, got {got!r}; the "
                        f"evictable blocks' counts were {counts}" + _why_victim(got, want, counts),
                    )
                candidates.discard(want)
                history.gone(want, "evicted")
            else:
                continue
            size = r.read("len(policy)", len, theirs)
            if size != len(candidates):
                r.fail(
                    "len",
                    f"`len(policy)` should be {len(candidates)} (the evictable "
                    f"blocks {sorted(candidates)}), got {size}",
                )
            for x in range(8):
                inside = r.read(f"{x} in policy", lambda x=x: x in theirs)
                if inside != (x in candidates):
                    r.fail(
                        f"{x} in",
                        f"`{x} in policy` should be {x in candidates} (the evictable blocks "
                        f"are {sorted(candidates)}), got {inside}"
                        + (" (does `__contains__` return its answer?)" if not inside else ""),
                    )
            for x in range(8) if callable(getattr(theirs, "count", None)) else ():
                count = r.read(f"policy.count({x})", theirs.count, x)
                if count != ours.count(x):
                    r.fail(
                        f"count({x})",
                        f"`policy.count({x})` should be {ours.count(x)}, "
                        f"got {count!r}" + history.why(x, ours.count(x)),
                    )

    return run


def evict_one(r: Replay, policy: Any) -> Any:
    """`policy.evict()` while some block is evictable; a StopIteration there means the bitmask
    look-up picked an empty bucket."""
    try:
        return r.run("policy.evict()", policy.evict)
    except Failure as failure:
        if "StopIteration" not in failure.cause:
            raise
        where = where_raised(failure.__cause__) if failure.__cause__ else ""
        raise Failure(
            failure.cause,
            "`policy.evict()` raised StopIteration while blocks are evictable: the bucket your "
            "bitmask look-up picked is empty. Either a bucket's bit stays set after its last "
            "block left (clear it when the bucket becomes empty), or the look-up picks the wrong "
            f"bucket (the lowest set bit of m is `(m & -m).bit_length() - 1`){where}",
        ) from None


class _History:
    """What happened to each block, to say why its count should be what it is."""

    def __init__(self, window: int | None) -> None:
        self.window = window
        self.touches: list[int] = []  # every touch, oldest first
        self.ended: dict[int, tuple[str, int]] = {}  # block -> (how its last life ended, when)

    def touch(self, b: int) -> None:
        self.touches.append(b)

    def gone(self, b: int, how: str) -> None:
        self.ended[b] = (how, len(self.touches))

    def why(self, x: int, want: int) -> str:
        how, since = self.ended.get(x, ("", 0))
        mine = sum(1 for b in self.touches[since:] if b == x)
        if mine == 0:
            reason = (
                f"block {x} was {how} and not touched since: its count starts again from 0"
                if how
                else f"block {x} was never touched: make_evictable and revive are not touches, "
                "and a block that was never touched has count 0"
            )
            return f" ({reason})"
        since_when = f"since it was {how}" if how else "in all"
        if self.window is None:
            return (
                f" (block {x} was touched {mine} time{'s' * (mine != 1)} {since_when}; only "
                "touch adds one, make_evictable and revive do not)"
            )
        recent = self.touches[max(since, len(self.touches) - self.window) :]
        return (
            f" (block {x} has {recent.count(x)} of the last {self.window} touches"
            + (f" since it was {how}" if how else "")
            + "; a touch leaving the window takes one off the count of the block it touched, "
            "unless that block was evicted or forgotten since)"
        )


def _why_victim(got: Any, want: int, counts: dict[int, int]) -> str:
    if got not in counts:
        return f" ({got!r} is not evictable: never evict a block in use or unknown)"
    if counts[got] == counts[want]:
        return (
            f" (both have count {counts[want]}, so the one that entered that bucket first goes, "
            f"block {want}. Either a block whose count changed stayed in its old bucket (change "
            "counts with set_count, which moves an evictable block to the recent end of its new "
            "bucket), or a bucket does not keep its blocks in the order they entered it)"
        )
    return (
        " (the lowest count goes first: is every evictable block in the bucket of its current "
        "count, and does evict take the lowest non-empty one?)"
    )


def library_lfu_ops(rng: random.Random) -> list[tuple[str, int]]:
    return policy_ops(rng, 8, 60)
