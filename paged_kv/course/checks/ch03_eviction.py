"""Chapter 03 checks: an eviction policy evicts like the library's LFU / aging LFU and keeps
the policy contract, in O(1) work with bounded structures.

A policy is driven the way `BlockPool` drives it: `touch(b)` (a use: allocation, hit or
keep), `make_evictable(b)` (its last reference went), `revive(b)` (a cached block is hit),
`evict()` (choose a victim and forget it), `forget(b)`, `len()` and `in`. `count(b)` is a
method, as in `paged_kv.cache.eviction.LFU`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from paged_kv.cache.eviction import LFU, AgingLFU
from paged_kv.course.checks.cost import (
    Meter,
    count_lines_executed,
    describe_touches,
    grows_in_time,
    instrument,
)
from paged_kv.course.checks.support import (
    CheckFailed,
    Replay,
    call,
    exercise,
    fixed,
    passed,
    search,
)


def _name(cls: Any) -> str:
    return getattr(getattr(cls, "func", cls), "__name__", "Policy")


def _policy_ops(rng: random.Random, num_blocks: int, length: int) -> list[tuple[str, int]]:
    kinds = ["touch", "touch", "touch", "evictable", "revive", "forget", "evict", "evict"]
    return [(rng.choice(kinds), rng.randrange(num_blocks)) for _ in range(length)]


def _differential(policy_cls: Any, make_reference: Any, args: str, kwargs: dict) -> Any:
    """Apply legal operations to the learner's policy and to the reference; every victim,
    size, membership and count must agree."""

    def run(ops: list[tuple[str, int]], r: Replay) -> None:
        theirs = r.run(f"policy = {_name(policy_cls)}({args})", policy_cls, **kwargs)
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


def _library_lfu_ops(rng: random.Random) -> list[tuple[str, int]]:
    return _policy_ops(rng, 8, 60)


@exercise(1, "BucketLFU")
def check_lfu(lfu_cls: type, *, seed: int = 0) -> None:
    """`lfu_cls()` evicts like the library's `LFU`, in O(1) work with bounded structures."""
    name = _name(lfu_cls)

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
        _differential(lfu_cls, LFU, "", {}),
        _library_lfu_ops,
        trials=300,
        seed=seed,
        keep=0,
        what="check_lfu",
    )
    _check_constant_work(lfu_cls, lambda n: {})
    fixed("Every step of the check", capped, Replay())
    passed("the victims of LFU on 300 random trials, O(1) work, no garbage")


def _victim(r: Replay, policy: Any, want: int, why: str) -> None:
    got = r.run("policy.evict()", policy.evict)
    if got != want:
        r.fail(f"victim {got}", f"`policy.evict()` should evict block {want} ({why}), got {got!r}")


@exercise(2, "WindowLFU")
def check_aging(aging_cls: type, *, seed: int = 1) -> None:
    """`aging_cls(window=w)` evicts like `paged_kv.cache.eviction.AgingLFU(window=w)`."""
    name = _name(aging_cls)

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
            _differential(
                aging_cls,
                lambda w=window: AgingLFU(window=w),
                f"window={window}",
                {"window": window},
            ),
            _library_lfu_ops,
            trials=60,
            seed=seed * 10 + window,
            keep=0,
            what=f"check_aging (window={window})",
        )
    _check_constant_work(aging_cls, lambda n: {"window": 4 * n})
    passed("the victims of AgingLFU for windows 1-6, O(1) work, no garbage")


@exercise(3, "your own policy")
def check_policy_contract(policy_cls: type, *, seed: int = 2) -> None:
    """`policy_cls()` keeps the interface's promises: victims are evictable blocks, sizes add up."""
    name = _name(policy_cls)

    def run(ops: list[tuple[str, int]], r: Replay) -> None:
        policy = r.run(f"policy = {name}()", policy_cls)
        candidates: set[int] = set()
        for op, b in ops:
            if op == "touch":
                r.run(f"policy.touch({b})", policy.touch, b)
            elif op == "evictable" and b not in candidates:
                r.run(f"policy.make_evictable({b})", policy.make_evictable, b)
                candidates.add(b)
            elif op == "revive" and b in candidates:
                r.run(f"policy.revive({b})", policy.revive, b)
                candidates.discard(b)
            elif op == "forget":
                r.run(f"policy.forget({b})", policy.forget, b)
                candidates.discard(b)
            elif op == "evict" and candidates:
                victim = r.run("policy.evict()", policy.evict)
                if victim not in candidates:
                    r.fail(
                        "victim not evictable",
                        f"`policy.evict()` returned {victim!r}, "
                        f"which is not evictable (the evictable blocks are "
                        f"{sorted(candidates)}): never evict a block in use or unknown",
                    )
                candidates.discard(victim)
            else:
                continue
            size = r.read("len(policy)", len, policy)
            if size != len(candidates):
                r.fail(
                    "len",
                    f"`len(policy)` should be {len(candidates)}, the number of "
                    f"evictable blocks {sorted(candidates)}; got {size}",
                )
            for x in range(10):
                inside = r.read(f"{x} in policy", lambda x=x: x in policy)
                if inside != (x in candidates):
                    r.fail(
                        "in",
                        f"`{x} in policy` should be {x in candidates} (evictable: "
                        f"{sorted(candidates)}), got {inside}",
                    )

    search(
        run,
        lambda rng: _policy_ops(rng, 10, 80),
        trials=200,
        seed=seed,
        keep=0,
        what="check_policy_contract",
    )
    passed("victims evictable, len and `in` exact, on 200 random trials")


# -- O(1) work and bounded structures ---------------------------------------------------------

_SIZES = (200, 10_000)


def _populated(
    policy_cls: type, kwargs: Callable[[int], dict], n: int, meter: Meter, baseline: int | None
) -> tuple[Any, int]:
    """A policy with `n` cached blocks of many counts, its containers counting into `meter`,
    filled 200 blocks at a time; returns it with the largest cost of a chunk (Python lines plus
    entries touched). With a `baseline`, a chunk costing far more fails at once (so a scan is
    caught before filling a big cache with it costs minutes)."""
    policy = call(f"policy = {_name(policy_cls)}()", policy_cls, **kwargs(n))
    instrument(policy, meter, "self")

    def fill(first: int) -> None:
        for b in range(first, min(n, first + 200)):
            policy.touch(b)
            policy.make_evictable(b)
            for _ in range(b % 20):  # hits on a cached block: many different counts
                policy.revive(b)
                policy.touch(b)
                policy.make_evictable(b)

    worst = 0
    for first in range(0, n, 200):
        meter.reset()
        doing = f"touching and caching blocks {first}..{first + 199}"
        lines = count_lines_executed(lambda f=first, d=doing: call(d, fill, f))
        cost = lines + meter.total
        worst = max(worst, cost)
        if baseline is not None and cost > 2 * baseline + 500:
            raise CheckFailed(
                f"caching 200 blocks (a touch, then hits) cost {baseline:,} (Python lines plus "
                f"container entries touched) in an empty policy, but {cost:,} with {first:,} "
                "blocks already cached"
                + (f", mostly by {describe_touches(meter, 1)}" if meter.total > lines else "")
                + ": something scans what grows with the cache. Every call must be O(1)."
            )
    return policy, worst


def _rounds(policy: Any, n: int, start: int, rounds: int = 50) -> None:
    """Hit a cached block, evict one, cache a new block: the cache keeps its size."""
    for i in range(start, start + rounds):
        b = (i * 7919) % n
        if b in policy:
            policy.revive(b)
            policy.touch(b)
            policy.make_evictable(b)
        policy.evict()
        policy.touch(10 * n + i)
        policy.make_evictable(10 * n + i)


def _check_constant_work(policy_cls: type, kwargs: Callable[[int], dict]) -> None:
    """Python lines and container entries per operation must not grow with the cache; the
    structures must not keep garbage; and, as a backstop, seconds must not grow either."""
    lines: dict[int, int] = {}
    touched: dict[int, int] = {}
    meters: dict[int, Meter] = {}
    policies: dict[int, Any] = {}
    baseline = None
    for n in _SIZES:
        meter = meters[n] = Meter()
        policy, cost = _populated(policy_cls, kwargs, n, meter, baseline)
        baseline = cost if baseline is None else baseline
        policies[n] = policy
        _bounded(policy, n, kwargs(n).get("window", 0))
        meter.reset()
        lines[n] = count_lines_executed(
            lambda p=policy, n=n: call(
                f"50 rounds of hit / evict / insert with {n:,} cached blocks", _rounds, p, n, 0
            )
        )
        touched[n] = meter.total
    small, large = _SIZES
    if lines[large] > 2 * lines[small] + 50:
        raise CheckFailed(
            f"50 hit/evict/insert rounds ran {lines[small]:,} Python lines with {small:,} cached "
            f"blocks but {lines[large]:,} with {large:,}: something scans. Keep the candidates "
            "in buckets by count and find the lowest non-empty bucket without looping over "
            "blocks."
        )
    if touched[large] > 2 * touched[small] + 100:
        raise CheckFailed(
            f"50 hit/evict/insert rounds touched {touched[small]:,} container entries with "
            f"{small:,} cached blocks but {touched[large]:,} with {large:,}, mostly by "
            f"{describe_touches(meters[large], 50)}: a search, even in C (`min(d, key=...)`, "
            "`sorted`, `in` on a list, list.remove), grows with the cache. Keep the candidates "
            "in buckets by count (each in recency order) and find the lowest non-empty bucket "
            "with the bitmask."
        )
    policy = policies[large]
    call(f"{large:,} more rounds", _rounds, policy, large, 50, large)
    _bounded(policy, large, kwargs(large).get("window", 0))
    ratio = grows_in_time(
        lambda n: (policies[n], n), lambda s: _rounds(s[0], s[1], 0, 30), _SIZES, fresh=False
    )
    if ratio is not None:
        raise CheckFailed(
            f"hit/evict/insert rounds took {ratio:,.0f}× longer with {large:,} cached blocks "
            f"than with {small:,} (the fastest of 5 rounds, measured twice): some work grows "
            "with the cache, where the line and entry counts cannot see it."
        )


def _bounded(policy: Any, n: int, window: int) -> None:
    size = _container_sizes(policy)
    if size > 6 * n + window + 5_000:
        raise CheckFailed(
            f"your structures hold {size:,} entries for {n:,} cached blocks: garbage is "
            "piling up (a heap with lazy deletion grows with every touch). Remove entries when "
            "a block moves or leaves."
        )


def _container_sizes(obj: Any) -> int:
    """Total length of the containers an object holds in its attributes (one level deep)."""
    total = 0
    for value in vars(obj).values():
        if isinstance(value, list | dict | set | tuple) or hasattr(value, "__len__"):
            try:
                total += len(value)
                if isinstance(value, list | tuple) and value and hasattr(value[0], "__len__"):
                    total += sum(len(v) for v in value if hasattr(v, "__len__"))
            except TypeError:
                pass
    return total
