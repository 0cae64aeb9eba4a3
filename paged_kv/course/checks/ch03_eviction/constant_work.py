"""O(1) work and bounded structures for an eviction policy: Python lines and container entries
per operation must not grow with the cache, nor garbage pile up; seconds are a backstop."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from paged_kv.course.checks.ch03_eviction.policy_trials import policy_name
from paged_kv.course.checks.cost import (
    Meter,
    count_lines_by_function,
    count_lines_executed,
    describe_touches,
    grows_in_time,
    instrument,
)
from paged_kv.course.checks.failures import CheckFailed, call

_SIZES = (200, 10_000)


def _grew_most(small: Counter[str], large: Counter[str]) -> str:
    """`, mostly in `f`` for the learner's function whose lines grew most, or ''."""
    growth = {f: large[f] - small.get(f, 0) for f in large}
    if not growth or max(growth.values()) <= 0:
        return ""
    where = max(growth, key=lambda f: growth[f])
    return f", mostly in `{where.split('.<genexpr>')[0]}`"


def _populated(
    policy_cls: type, kwargs: Callable[[int], dict], n: int, meter: Meter, baseline: int | None
) -> tuple[Any, int]:
    """A policy with `n` cached blocks of many counts, its containers counting into `meter`,
    filled 200 blocks at a time; returns it with the largest cost of a chunk (Python lines plus
    entries touched). With a `baseline`, a chunk costing far more fails at once (so a scan is
    caught before filling a big cache with it costs minutes)."""
    policy = call(f"policy = {policy_name(policy_cls)}()", policy_cls, **kwargs(n))
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


def expect_constant_work(policy_cls: type, kwargs: Callable[[int], dict]) -> None:
    """Python lines and container entries per operation must not grow with the cache; the
    structures must not keep garbage; and, as a backstop, seconds must not grow either."""
    lines: dict[int, int] = {}
    by_function: dict[int, Counter[str]] = {}
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
        if n == _SIZES[0]:
            _each_call_is_small(policy, meter)
        meter.reset()
        lines[n], by_function[n] = count_lines_by_function(
            lambda p=policy, n=n: call(
                f"50 rounds of hit / evict / insert with {n:,} cached blocks", _rounds, p, n, 0
            )
        )
        touched[n] = meter.total
    small, large = _SIZES
    if lines[large] > 2 * lines[small] + 50:
        raise CheckFailed(
            f"50 hit/evict/insert rounds ran {lines[small]:,} Python lines with {small:,} cached "
            f"blocks but {lines[large]:,} with {large:,}"
            f"{_grew_most(by_function[small], by_function[large])}: something scans what grows "
            "with the cache. Keep the candidates in buckets by count and find the lowest "
            "non-empty bucket without looping over blocks."
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
    _lowest_bucket_by_bitmask(policy_cls, kwargs)
    no_garbage_after_churn(policy_cls, kwargs(100))
    ratio = grows_in_time(lambda n: (policies[n], n), lambda s: _rounds(s[0], s[1], 0, 30), _SIZES)
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


def _each_call_is_small(policy: Any, meter: Meter) -> None:
    """`len` and `in` are one look-up each, whatever the policy holds: no walk over the
    buckets (256 of them, however few blocks they hold)."""
    for expression, read in (
        ("len(policy)", lambda: len(policy)),
        ("7 in policy", lambda: 7 in policy),
        ("-1 in policy", lambda: -1 in policy),
    ):
        meter.reset()
        lines, mine = count_lines_by_function(lambda r=read, e=expression: call(e, r))
        work = lines + meter.total
        if work > 40:
            where = max(mine, key=lambda f: mine[f]).split(".<genexpr>")[0] if mine else ""
            raise CheckFailed(
                f"`{expression}` ran {lines:,} Python lines and touched {meter.total:,} "
                f"container entries with 200 cached blocks"
                + (f", in `{where}`" if where else "")
                + ": it must be O(1), one look-up, not a walk over the buckets or the blocks. "
                "Keep a dict of the evictable blocks (block -> bucket): its `len` and `in` "
                "answer at once."
            )


def _filled(policy_cls: type, kwargs: dict, count: int, meter: Meter) -> Any:
    """A policy whose 20 evictable blocks all have `count` touches (a window, if any, keeps
    them all)."""
    policy = call(f"policy = {policy_name(policy_cls)}()", policy_cls, **kwargs)

    def fill() -> None:
        for b in range(20):
            for _ in range(count):
                policy.touch(b)
            policy.make_evictable(b)

    call(f"touching 20 blocks {count} times each", fill)
    instrument(policy, meter, "self")
    return policy


def _lowest_bucket_by_bitmask(policy_cls: type, kwargs: Callable[[int], dict]) -> None:
    """Evicting from bucket 255 costs what evicting from bucket 1 does: the bitmask's lowest
    set bit names the bucket, no loop walks up to it."""
    work = {}
    for count in (1, 255):  # 255: the top bucket (MAX_BUCKET), the farthest from bucket 0
        meter = Meter()
        policy = _filled(policy_cls, kwargs(2_000), count, meter)
        meter.reset()
        lines, mine = count_lines_by_function(
            lambda p=policy, c=count: call(
                f"10 evictions from 20 blocks of count {c}",
                lambda: [p.evict() for _ in range(10)],
            )
        )
        work[count] = (lines + meter.total, mine)
    (low, low_mine), (high, high_mine) = work[1], work[255]
    if high > 2 * low + 200:
        raise CheckFailed(
            f"10 evictions cost {low:,} (Python lines plus container entries touched) when the "
            f"lowest non-empty bucket is bucket 1, but {high:,} when it is the top bucket"
            f"{_grew_most(low_mine, high_mine)}: something walks the buckets up to the lowest "
            "non-empty one. Find it with the bitmask's lowest set bit, "
            "`(m & -m).bit_length() - 1`, in one step."
        )


def no_garbage_after_churn(policy_cls: type, kwargs: dict, what: str = "") -> None:
    """Blocks that were evicted or forgotten leave nothing behind: while 20,000 more blocks
    pass through a cache of 100, the structures do not grow."""
    policy = call(f"policy = {policy_name(policy_cls)}()", policy_cls, **kwargs)

    def churn(first: int, last: int) -> None:
        for b in range(first, last):
            policy.touch(b)
            if b % 3 == 0:
                policy.forget(b - 3)  # an in-use block whose content is dropped
            else:
                policy.make_evictable(b)
            if b % 5 == 0 and b - 10 in policy:  # a hit on a cached block
                policy.revive(b - 10)
                policy.touch(b - 10)
                policy.make_evictable(b - 10)
            while len(policy) > 100:
                policy.evict()

    call("blocks 0..9,999 passing through a cache of 100", churn, 0, 10_000)
    before = _sizes(policy)
    call("blocks 10,000..29,999 passing through a cache of 100", churn, 10_000, 30_000)
    after = _sizes(policy)
    grown = {key: after[key] - before.get(key, 0) for key in after}
    if grown and sum(grown.values()) > 2_000:
        key = max(grown, key=lambda k: grown[k])
        raise CheckFailed(
            f"while 20,000 more blocks went through a cache of 100 (touched, cached, evicted "
            f"or forgotten), `self.{key}` grew by {grown[key]:,} entries to {after[key]:,}: it "
            "keeps something for blocks that are gone. Remove a block's entries when it is "
            "evicted or forgotten"
            + (
                what
                or ", so that memory is bounded by the cache (and the window), not by "
                "every block ever seen."
            )
        )


def _sizes(obj: Any) -> dict[str, int]:
    """Entries per attribute of `obj` (see `_container_sizes`)."""
    attributes = getattr(obj, "__dict__", {})
    return {key: _container_sizes(_Only(value)) for key, value in attributes.items()}


class _Only:
    """One attribute, for `_container_sizes`."""

    def __init__(self, value: Any) -> None:
        self.value = value
