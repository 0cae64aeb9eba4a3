"""Exercises 1 and 2 of chapter 03: `BucketLFU` evicts like the library's `LFU`, and
`WindowLFU` like `AgingLFU(window=w)`, both in O(1) work with bounded structures."""

from __future__ import annotations

from typing import Any

from paged_kv.cache.eviction import LFU, AgingLFU
from paged_kv.course.checks.ch03_eviction.constant_work import expect_constant_work
from paged_kv.course.checks.ch03_eviction.policy_trials import (
    differential,
    library_lfu_ops,
    policy_name,
)
from paged_kv.course.checks.failures import exercise, passed
from paged_kv.course.checks.replay import Replay, fixed, search


@exercise(1, "BucketLFU")
def check_lfu(lfu_cls: type, *, seed: int = 0) -> None:
    """`lfu_cls()` evicts like the library's `LFU`, in O(1) work with bounded structures."""
    name = policy_name(lfu_cls)

    def scenario(r: Replay) -> None:
        policy = r.run(f"policy = {name}()", lfu_cls)
        for b in (1, 2, 3):
            r.run(f"policy.touch({b})", policy.touch, b)
            r.run(f"policy.make_evictable({b})", policy.make_evictable, b)
        r.run("policy.touch(1)", policy.touch, 1)
        r.run("policy.touch(3)", policy.touch, 3)
        _victim(r, policy, 2, "block 2 has the lowest count (1)")
        _victim(
            r,
            policy,
            1,
            "blocks 1 and 3 both have count 2: the tie goes to the least recently touched, block 1",
        )
        r.run("policy.touch(3)", policy.touch, 3)
        r.run("policy.revive(3)", policy.revive, 3)
        got = r.read("len(policy)", len, policy)
        if got != 0:
            r.fail("len", f"block 3 is in use again: nothing is evictable, len is {got}")
        count = r.read("policy.count(3)", policy.count, 3)
        if count != 3:
            r.fail(
                "count survives",
                f"a revived block keeps its count: policy.count(3) should be 3, got {count}",
            )
        r.run("policy.touch(2)", policy.touch, 2)
        count = r.read("policy.count(2)", policy.count, 2)
        if count != 1:
            r.fail(
                "count after eviction",
                f"block 2 was evicted, so its count starts again: "
                f"policy.count(2) should be 1, got {count}",
            )

    def capped(r: Replay) -> None:
        policy = r.run(f"policy = {name}()", lfu_cls)
        for _ in range(300):
            policy.touch(5)
        r.note("for _ in range(300): policy.touch(5)")
        r.run("policy.make_evictable(5)", policy.make_evictable, 5)
        for _ in range(260):
            policy.touch(6)
        r.note("for _ in range(260): policy.touch(6)")
        r.run("policy.make_evictable(6)", policy.make_evictable, 6)
        _victim(
            r,
            policy,
            5,
            "counts above MAX_BUCKET (255) share the top bucket and tie, so "
            "recency decides: block 5 entered it first",
        )

    fixed("Every step of the check", scenario, Replay())
    search(
        differential(lfu_cls, LFU, "", {}),
        library_lfu_ops,
        trials=300,
        seed=seed,
        keep=0,
        what="check_lfu",
    )
    expect_constant_work(lfu_cls, lambda n: {})
    fixed("Every step of the check", capped, Replay())
    passed("the victims of LFU on 300 random trials, O(1) work, no garbage")


def _victim(r: Replay, policy: Any, want: int, why: str) -> None:
    got = r.run("policy.evict()", policy.evict)
    if got != want:
        r.fail(f"victim {got}", f"`policy.evict()` should evict block {want} ({why}), got {got!r}")


@exercise(2, "WindowLFU")
def check_aging(aging_cls: type, *, seed: int = 1) -> None:
    """`aging_cls(window=w)` evicts like `paged_kv.cache.eviction.AgingLFU(window=w)`."""
    name = policy_name(aging_cls)

    def scenario(r: Replay) -> None:
        policy = r.run(f"policy = {name}(window=2)", aging_cls, window=2)
        for b in (1, 1, 2):
            r.run(f"policy.touch({b})", policy.touch, b)
        count = r.read("policy.count(1)", policy.count, 1)
        if count != 1:
            r.fail(
                "window",
                "with window=2, after touches 1, 1, 2 only the last two count: "
                f"policy.count(1) should be 1, got {count}",
            )
        policy = r.run(f"policy = {name}(window=3)", aging_cls, window=3)
        for line, fn, b in [("touch", "touch", 7), ("make_evictable", "make_evictable", 7)]:
            r.run(f"policy.{line}({b})", getattr(policy, fn), b)
        _victim(r, policy, 7, "it is the only evictable block")
        for b in (7, 8, 8):
            r.run(f"policy.touch({b})", policy.touch, b)
        count = r.read("policy.count(7)", policy.count, 7)
        if count != 1:
            r.fail(
                "lives",
                f"policy.count(7) should be 1, got {count}: only block 7's touch since it came "
                "back counts. Its first touch happened before it was evicted; when that touch "
                "leaves the window it must not lower the count of block 7's new life in the "
                "cache",
            )

    fixed("Every step of the check", scenario, Replay())
    for window in range(1, 7):
        search(
            differential(
                aging_cls,
                lambda w=window: AgingLFU(window=w),
                f"window={window}",
                {"window": window},
            ),
            library_lfu_ops,
            trials=60,
            seed=seed * 10 + window,
            keep=0,
            what=f"check_aging (window={window})",
        )
    expect_constant_work(aging_cls, lambda n: {"window": 4 * n})
    passed("the victims of AgingLFU for windows 1-6, O(1) work, no garbage")
