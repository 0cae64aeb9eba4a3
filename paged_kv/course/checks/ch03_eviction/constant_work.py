"""O(1) work and bounded structures for an eviction policy: Python lines and container entries
per operation must not grow with the cache, nor garbage pile up; seconds are a backstop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from paged_kv.course.checks.ch03_eviction.policy_trials import policy_name
from paged_kv.course.checks.cost import (
    Meter,
    count_lines_executed,
    describe_touches,
    grows_in_time,
    instrument,
)
from paged_kv.course.checks.failures import CheckFailed, call

_SIZES = (200, 10_000)


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
