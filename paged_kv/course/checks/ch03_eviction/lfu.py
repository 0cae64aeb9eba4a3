"""Exercises 1 and 2 of chapter 03: `BucketLFU` evicts like the library's `LFU`, and
`WindowLFU` like `AgingLFU(window=w)`, both in O(1) work with bounded structures."""

from __future__ import annotations

from typing import Any

from paged_kv.cache.eviction import LFU, AgingLFU
from paged_kv.course.checks.ch03_eviction.constant_work import expect_constant_work
from paged_kv.course.checks.ch03_eviction.policy_trials import (
    differential,
    evict_one,
    expect_block,
    library_lfu_ops,
    policy_name,
    require_policy_class,
)
from paged_kv.course.checks.failures import exercise, passed, short_repr, where_raised
from paged_kv.course.checks.replay import Replay, fixed, search
from paged_kv.errors import InvalidBlock


@exercise(1, "BucketLFU")
def check_lfu(lfu_cls: type, *, seed: int = 0) -> None:
    """`lfu_cls()` evicts like the library's `LFU`, in O(1) work with bounded structures."""
    require_policy_class(lfu_cls, "check_lfu", counts=True)
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
        _member(r, policy, 3, False, "block 3 was revived: it is in use, not evictable")
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

    def rules(r: Replay) -> None:
        policy = r.run(f"policy = {name}()", lfu_cls)
        _refused(r, "policy.evict()", policy.evict, InvalidBlock, "nothing is evictable")
        r.run("policy.make_evictable(4)", policy.make_evictable, 4)
        _member(r, policy, 4, True, "make_evictable(4) made block 4 evictable, untouched or not")
        count = r.read("policy.count(4)", policy.count, 4)
        if count != 0:
            r.fail(
                "count of an untouched block",
                f"policy.count(4) should be 0, got {count!r}: block 4 was never touched, and "
                "make_evictable is not a touch (only touch adds one)",
            )
        _victim(r, policy, 4, "it is the only evictable block")
        for line in ("touch(1)", "touch(2)", "make_evictable(1)", "make_evictable(2)"):
            r.run(f"policy.{line}", getattr(policy, line.split("(")[0]), int(line[-2]))
        r.run("policy.make_evictable(1)", policy.make_evictable, 1)
        _victim(
            r,
            policy,
            1,
            "blocks 1 and 2 both have count 1 and block 1 became evictable first; "
            "make_evictable of a block that is already evictable changes nothing",
        )
        r.run("policy.touch(9)", policy.touch, 9)
        _refused(
            r,
            "policy.revive(9)",
            lambda: policy.revive(9),
            (KeyError, InvalidBlock),
            "block 9 is in use, not evictable: reviving it is the caller's bug, to report, "
            "not to ignore",
        )

    def set_count(r: Replay) -> None:
        policy = r.run(f"policy = {name}()", lfu_cls)
        # the library's LFU calls it `_set_count`
        setter = getattr(policy, "set_count", getattr(policy, "_set_count", None))
        if not callable(setter):
            r.fail("set_count", f"`{name}` has no `set_count(block, count)` method")
        for line in ("touch(1)", "touch(2)", "make_evictable(1)", "make_evictable(2)"):
            r.run(f"policy.{line}", getattr(policy, line.split("(")[0]), int(line[-2]))
        r.run("policy.set_count(1, 1)", setter, 1, 1)
        _victim(
            r,
            policy,
            2,
            "set_count moves an evictable block to the recent end of its bucket, even when its "
            "bucket does not change: block 1 went behind block 2",
        )
        for line in ("touch(3)", "touch(3)", "make_evictable(3)"):
            r.run(f"policy.{line}", getattr(policy, line.split("(")[0]), 3)
        r.run("policy.set_count(3, 0)", setter, 3, 0)
        count = r.read("policy.count(3)", policy.count, 3)
        if count != 0:
            r.fail("set_count", f"policy.count(3) should be 0 after set_count(3, 0), got {count!r}")
        _victim(r, policy, 3, "set_count(3, 0) moved block 3 to bucket 0, below block 1's count 1")
        r.run("policy.set_count(5, 7)", setter, 5, 7)
        count = r.read("policy.count(5)", policy.count, 5)
        if count != 7:
            r.fail("set_count", f"policy.count(5) should be 7 after set_count(5, 7), got {count!r}")
        _member(r, policy, 5, False, "set_count changes a count; it makes nothing evictable")

    def touched_then_evictable(r: Replay, touches_of: tuple[tuple[int, int], ...]) -> Any:
        """A new policy whose blocks were each touched so many times, then made evictable."""
        policy = r.run(f"policy = {name}()", lfu_cls)
        for b, touches in touches_of:
            for _ in range(touches):
                policy.touch(b)
            r.note(f"for _ in range({touches}): policy.touch({b})")
            r.run(f"policy.make_evictable({b})", policy.make_evictable, b)
        return policy

    def capped(r: Replay) -> None:
        policy = touched_then_evictable(r, ((5, 300), (6, 260), (7, 270)))
        _victim(
            r,
            policy,
            5,
            "counts above MAX_BUCKET (255) share the top bucket and tie, so "
            "recency decides: block 5 entered it first",
        )
        r.run("policy.touch(6)", policy.touch, 6)
        _victim(
            r,
            policy,
            7,
            "block 6 was touched: it moves to the recent end of the top bucket, even though its "
            "bucket does not change",
        )
        policy = touched_then_evictable(r, ((8, 255), (9, 254)))
        _victim(
            r,
            policy,
            9,
            "block 9 has count 254, block 8 has 255: they share a bucket only from 255 "
            "(MAX_BUCKET) up, so the top bucket is MAX_BUCKET itself",
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
    # the rules random trials rarely reach: counts past MAX_BUCKET, nothing evictable, twice
    # evictable, set_count
    fixed("Every step of the check", capped, Replay())
    fixed("Every step of the check", rules, Replay())
    fixed("Every step of the check", set_count, Replay())
    passed("the victims of LFU on 300 random trials, O(1) work, no garbage")


def _victim(r: Replay, policy: Any, want: int, why: str) -> None:
    got = evict_one(r, policy)
    expect_block(r, got)
    if got != want:
        r.fail(f"victim {got}", f"`policy.evict()` should evict block {want} ({why}), got {got!r}")


def _member(r: Replay, policy: Any, block: int, want: bool, why: str) -> None:
    inside = r.read(f"{block} in policy", lambda: block in policy)
    if inside != want:
        r.fail(
            f"{block} in",
            f"`{block} in policy` should be {want} ({why}), got {inside}"
            + (" (does `__contains__` return its answer?)" if not inside else ""),
        )


def _refused(
    r: Replay,
    line: str,
    fn: Any,
    errors: type[Exception] | tuple[type[Exception], ...],
    why: str,
) -> None:
    """`line` must raise one of `errors` (because `why`)."""
    names = " or ".join(e.__name__ for e in (errors if isinstance(errors, tuple) else (errors,)))
    r.note(line)
    try:
        result = fn()
    except errors:
        r.lines[-1] = f"{line}  # raises {names}"
        return
    except NotImplementedError:
        raise
    except Exception as exc:
        text = f": {exc}" if str(exc) else ""
        r.fail(
            f"{line}: {type(exc).__name__}",
            f"`{line}` should raise {names} ({why}), but it raised "
            f"{type(exc).__name__}{text}{where_raised(exc)}",
        )
    r.fail(
        f"{line}: returned",
        f"`{line}` should raise {names} ({why}), but it returned {short_repr(result, 80)}",
    )


@exercise(2, "WindowLFU")
def check_aging(aging_cls: type, *, seed: int = 1) -> None:
    """`aging_cls(window=w)` evicts like `paged_kv.cache.eviction.AgingLFU(window=w)`."""
    require_policy_class(aging_cls, "check_aging", counts=True, window=True)
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
                "cache" + _forget_hint(aging_cls),
            )

    def order(r: Replay) -> None:
        policy = r.run(f"policy = {name}(window=3)", aging_cls, window=3)
        for line in ("touch(2)", "touch(1)", "touch(1)", "make_evictable(1)", "make_evictable(2)"):
            r.run(f"policy.{line}", getattr(policy, line.split("(")[0]), int(line[-2]))
        r.run("policy.touch(3)", policy.touch, 3)
        r.run("policy.touch(2)", policy.touch, 2)
        _victim(
            r,
            policy,
            2,
            "the last touch, of block 2, is counted first (block 2 goes back to bucket 1), "
            "then the touch of block 1 that left the window is taken off (block 1 goes to "
            "bucket 1 after it): count the new touch before removing the one that leaves",
        )

    fixed("Every step of the check", scenario, Replay())
    for window in range(1, 7):
        search(
            differential(
                aging_cls,
                lambda w=window: AgingLFU(window=w),
                f"window={window}",
                {"window": window},
                window,
            ),
            library_lfu_ops,
            trials=60,
            seed=seed * 10 + window,
            keep=0,
            what=f"check_aging (window={window})",
        )
    expect_constant_work(aging_cls, lambda n: {"window": 4 * n})
    fixed("Every step of the check", order, Replay())
    passed("the victims of AgingLFU for windows 1-6, O(1) work, no garbage")


def _forget_hint(policy_cls: Any) -> str:
    """If `policy_cls.evict` stops tracking its victim without calling `forget`, say so: a
    subclass's `forget` (where WindowLFU ends a life) never hears of evicted blocks."""
    if not isinstance(policy_cls, type):
        return ""
    forgotten: list[Any] = []

    class Probe(policy_cls):  # type: ignore[misc, valid-type]
        def forget(self, block: Any) -> None:
            forgotten.append(block)
            super().forget(block)

    try:
        policy = Probe(window=3)
        policy.touch(7)
        policy.make_evictable(7)
        policy.evict()
    except Exception:
        return ""
    if 7 in forgotten:
        return ""
    return (
        ". Your evict() never calls forget(victim), so WindowLFU.forget never ends an evicted "
        "block's life: call self.forget(block) in BucketLFU.evict (or end the life in a "
        "WindowLFU.evict too)"
    )
