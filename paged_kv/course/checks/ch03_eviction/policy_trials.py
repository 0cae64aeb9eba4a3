"""A policy under test, driven the way `BlockPool` drives it: random operation sequences, and
the differential run that compares every victim, size and count with a reference policy.
"""

from __future__ import annotations

import random
from typing import Any

from paged_kv.course.checks.replay import Replay


def policy_name(cls: Any) -> str:
    return getattr(getattr(cls, "func", cls), "__name__", "Policy")


def policy_ops(rng: random.Random, num_blocks: int, length: int) -> list[tuple[str, int]]:
    kinds = ["touch", "touch", "touch", "evictable", "revive", "forget", "evict", "evict"]
    return [(rng.choice(kinds), rng.randrange(num_blocks)) for _ in range(length)]


def differential(policy_cls: Any, make_reference: Any, args: str, kwargs: dict) -> Any:
    """Apply legal operations to the learner's policy and to the reference; every victim,
    size, membership and count must agree."""

    def run(ops: list[tuple[str, int]], r: Replay) -> None:
        theirs = r.run(f"policy = {policy_name(policy_cls)}({args})", policy_cls, **kwargs)
        ours = make_reference()
        candidates: set[int] = set()
        for op, b in ops:
            if op == "touch":
                r.run(f"policy.touch({b})", theirs.touch, b)
                ours.touch(b)
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
            elif op == "evict" and candidates:
                want = ours.evict()
                counts = {c: ours.count(c) for c in sorted(candidates)}
                got = r.run("policy.evict()", theirs.evict)
                if got != want:
                    r.fail(
                        f"victim {got} instead of {want}",
                        f"`policy.evict()` should evict block {want}, got {got!r}; the "
                        f"evictable blocks' counts were {counts}" + _why_victim(got, want, counts),
                    )
                candidates.discard(want)
            else:
                continue
            size = r.read("len(policy)", len, theirs)
            if size != len(candidates):
                r.fail(
                    "len",
                    f"`len(policy)` should be {len(candidates)} (the evictable "
                    f"blocks {sorted(candidates)}), got {size}",
                )
            for x in range(8) if callable(getattr(theirs, "count", None)) else ():
                count = r.read(f"policy.count({x})", theirs.count, x)
                if count != ours.count(x):
                    r.fail(
                        f"count({x})",
                        f"`policy.count({x})` should be {ours.count(x)}, "
                        f"got {count!r}" + _why_count(ops, x),
                    )

    return run


def _why_victim(got: Any, want: int, counts: dict[int, int]) -> str:
    if got not in counts:
        return f" ({got!r} is not evictable: never evict a block in use)"
    if counts[got] == counts[want]:
        return (
            f" (both have count {counts[want]}: the tie goes to the least recently touched, "
            "so each bucket must keep its blocks in the order they entered it)"
        )
    return " (the lowest count goes first)"


def _why_count(ops: list[tuple[str, int]], x: int) -> str:
    if any(op in ("evict", "forget") for op, _ in ops):
        return " (an evicted or forgotten block starts again from 0 when it is touched next)"
    return ""


def library_lfu_ops(rng: random.Random) -> list[tuple[str, int]]:
    return policy_ops(rng, 8, 60)
