"""Chapter 03 checks: an eviction policy evicts like the library's LFU / aging LFU and keeps
the policy contract, in O(1) work with bounded structures."""

from __future__ import annotations

import random
from typing import Any

from paged_kv.cache.eviction import LFU, AgingLFU
from paged_kv.course.checks.support import (
    count_lines_executed,
    expect,
    passed,
)


def _policy_ops(rng: random.Random, num_blocks: int, length: int) -> list[tuple[str, int]]:
    kinds = ["touch", "touch", "evictable", "revive", "forget", "evict"]
    return [(rng.choice(kinds), rng.randrange(num_blocks)) for _ in range(length)]


def _compare_policies(theirs: Any, ours: Any, ops: list[tuple[str, int]], what: str) -> None:
    """Apply the same legal operations to both; every victim and size must agree."""
    candidates: set[int] = set()
    log: list[str] = []
    for op, b in ops:
        if op == "touch":
            theirs.touch(b)
            ours.touch(b)
        elif op == "evictable" and b not in candidates:
            theirs.make_evictable(b)
            ours.make_evictable(b)
            candidates.add(b)
        elif op == "revive" and b in candidates:
            theirs.revive(b)
            ours.revive(b)
            candidates.discard(b)
        elif op == "forget":
            theirs.forget(b)
            ours.forget(b)
            candidates.discard(b)
        elif op == "evict" and candidates:
            want, got = ours.evict(), theirs.evict()
            log.append(f"evict()→{got}")
            expect(
                got == want,
                f"{what}: after {' '.join(log[-8:-1])} ... evict() should return block {want}, "
                f"got {got}.",
            )
            candidates.discard(want)
            continue
        else:
            continue
        log.append(f"{op}({b})")
        expect(
            len(theirs) == len(candidates),
            f"{what}: after {' '.join(log[-8:])}, len() should be {len(candidates)} evictable "
            f"blocks, got {len(theirs)}.",
        )


def check_lfu(lfu_cls: type) -> None:
    """`lfu_cls()` evicts like the library's `LFU`, in O(1) work with bounded structures."""

    policy = lfu_cls()
    for b in (1, 2, 3):
        policy.touch(b)
        policy.make_evictable(b)
    policy.touch(1)
    policy.touch(3)
    expect(
        policy.evict() == 2,
        "blocks 1, 2, 3 touched once, then 1 and 3 touched again: block 2 has the lowest "
        "count and must be evicted first.",
    )
    expect(
        policy.evict() == 1,
        "blocks 1 and 3 both have count 2: the tie goes to the least recently touched, block 1.",
    )
    rng = random.Random(0)
    for trial in range(300):
        _compare_policies(lfu_cls(), LFU(), _policy_ops(rng, 8, 60), f"random trial {trial}")
    _check_constant_work(lfu_cls)
    passed("LFU")


def check_aging(aging_cls: type) -> None:
    """`aging_cls(window=w)` evicts like `paged_kv.cache.eviction.AgingLFU(window=w)`."""

    policy = aging_cls(window=2)
    policy.touch(1)
    policy.touch(1)
    policy.touch(2)  # the first touch of block 1 leaves the window
    expect(
        policy.count(1) == 1,
        "with window=2, after touches 1, 1, 2 only the last two count: block 1 should have "
        f"count 1, it has {policy.count(1)}.",
    )
    rng = random.Random(1)
    for trial in range(300):
        window = rng.randint(1, 6)
        _compare_policies(
            aging_cls(window=window), AgingLFU(window=window), _policy_ops(rng, 8, 60),
            f"random trial {trial} (window={window})",
        )  # fmt: skip
    _check_constant_work(aging_cls)
    passed("LFU with aging")


def check_policy_contract(policy_cls: type) -> None:
    """`policy_cls()` keeps the interface's promises: victims are evictable blocks, sizes add up."""
    rng = random.Random(2)
    for trial in range(200):
        policy, candidates = policy_cls(), set()
        for op, b in _policy_ops(rng, 10, 80):
            if op == "touch":
                policy.touch(b)
            elif op == "evictable" and b not in candidates:
                policy.make_evictable(b)
                candidates.add(b)
            elif op == "revive" and b in candidates:
                policy.revive(b)
                candidates.discard(b)
            elif op == "forget":
                policy.forget(b)
                candidates.discard(b)
            elif op == "evict" and candidates:
                victim = policy.evict()
                expect(
                    victim in candidates,
                    f"trial {trial}: evict() returned {victim}, which is not evictable "
                    f"(evictable: {sorted(candidates)}). Never evict a block in use.",
                )
                candidates.discard(victim)
            expect(
                len(policy) == len(candidates)
                and all((x in policy) == (x in candidates) for x in range(10)),
                f"trial {trial}: len() and `in` must describe exactly the evictable blocks "
                f"{sorted(candidates)}.",
            )
    passed("policy contract")


def _check_constant_work(policy_cls: type) -> None:
    """Python lines per operation and container sizes must not grow with the cache."""
    lines, sizes = {}, {}
    for n in (200, 20_000):
        policy = policy_cls()
        for b in range(n):
            policy.touch(b)
            policy.make_evictable(b)
            for _ in range(b % 50):  # hits on a cached block: many different counts
                policy.touch(b)
        for b in range(n, 2 * n):  # churn: the structures must not keep garbage
            policy.evict()
            policy.touch(b)
            policy.make_evictable(b)

        def work(p=policy, n=n):
            for b in range(2 * n, 2 * n + 50):
                p.touch(b % n + n)  # hits on cached blocks
                p.evict()
                p.touch(b)
                p.make_evictable(b)

        lines[n] = count_lines_executed(work)
        sizes[n] = _container_sizes(policy)
    expect(
        lines[20_000] <= 2 * lines[200] + 50,
        f"50 hit/evict/insert rounds ran {lines[200]} Python lines with 200 cached blocks but "
        f"{lines[20_000]} with 20,000: something scans. Keep the candidates in buckets by count "
        "and find the lowest non-empty bucket without looping over blocks.",
    )
    expect(
        sizes[20_000] <= 12 * 20_000,
        f"your structures hold {sizes[20_000]} entries for 20,000 cached blocks: garbage is "
        "piling up (a heap with lazy deletion grows with every touch). Remove entries when "
        "a block moves or leaves.",
    )


def _container_sizes(obj: Any) -> int:
    """Total length of the containers an object holds in its attributes (one level deep)."""
    total = 0
    for value in vars(obj).values():
        if isinstance(value, list | dict | set | tuple) or hasattr(value, "__len__"):
            try:
                total += len(value)
                if isinstance(value, list | tuple) and value and hasattr(value[0], "__len__"):
                    total += sum(len(v) for v in value)
            except TypeError:
                pass
    return total
