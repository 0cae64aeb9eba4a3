"""Chapter 03 checks: an eviction policy evicts like the library's LFU / aging LFU (or, for
the open exercise, keeps the policy contract), in O(1) work with bounded structures.

A policy is driven the way `BlockPool` drives it: `touch(b)`, `make_evictable(b)`,
`revive(b)`, `evict()`, `forget(b)`, `len()` and `in` (and `count(b)`, `set_count(b, c)` for
the LFUs). Random calls go to the learner's policy and to the library's; every victim, size,
membership and count must agree. Its `key_of` names each block's content apart from its id,
so a victim must be the block itself. Only behaviour and counted work are checked, never a
structure: any that is O(1) passes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from paged_kv.cache.eviction import LFU, AgingLFU
from paged_kv.course.checks import causes
from paged_kv.course.checks.cost import constant_work, grows_in_time
from paged_kv.course.checks.failures import CheckFailed, call, exercise, passed, stage
from paged_kv.course.checks.harness import Trial, fixed, search
from paged_kv.errors import InvalidBlock


def _name(cls: Any) -> str:
    return getattr(getattr(cls, "func", cls), "__name__", "Policy")


def _content(block: int) -> str:
    return f"content-{block}"


def _made(policy_cls: Any, check: str, **kwargs: Any) -> Any:
    """A policy from `policy_cls`, whose `key_of` tells content from ids."""
    if not callable(policy_cls) or (
        hasattr(policy_cls, "evict") and not isinstance(policy_cls, type)
    ):
        raise CheckFailed(
            causes.say(
                causes.BAD_SIGNATURE,
                doing=f"checks.{check}",
                why="pass your policy's class (such as `BucketLFU`), not an instance",
            ),
            causes.BAD_SIGNATURE,
        )
    policy: Any = policy_cls(**kwargs)
    policy.key_of = _content
    return policy


def _draw(kinds: tuple[str, ...], window: bool) -> Callable[[random.Random], list[Any]]:
    def draw(rng: random.Random) -> list[Any]:
        ops: list[Any] = [rng.randint(1, 6) if window else 0]
        ops += [
            (rng.choice(kinds), rng.randrange(8), rng.choice([0, 1, 2, 254, 255, 300]))
            for _ in range(60)
        ]
        return ops

    return draw


_KINDS = ("touch", "touch", "touch", "evictable", "revive", "forget", "evict", "evict")


def _play(policy_cls: Any, check: str, *, exact: bool) -> Callable[[list[Any], Trial], None]:
    """Apply the operations to the learner's policy and to the library's LFU (aging when the
    trial has a window); `exact`: victims and counts must be the library's too."""

    def play(ops: list[Any], trial: Trial) -> None:
        window = ops[0]
        args = f"window={window}" if window else ""
        mine = trial.run(
            f"policy = {_name(policy_cls)}({args}); policy.key_of = lambda b: f'content-{{b}}'",
            lambda: _made(policy_cls, check, **({"window": window} if window else {})),
        )
        ref = AgingLFU(window) if window else LFU()
        for kind, b, c in ops[1:]:
            if kind == "touch":
                trial.same(
                    f"policy.touch({b})", lambda b=b: mine.touch(b), lambda b=b: ref.touch(b)
                )
            elif kind == "evictable":
                trial.same(
                    f"policy.make_evictable({b})",
                    lambda b=b: mine.make_evictable(b),
                    lambda b=b: ref.make_evictable(b),
                )
            elif kind == "set_count":
                trial.same(
                    f"policy.set_count({b}, {c})",
                    lambda b=b, c=c: mine.set_count(b, c),
                    lambda b=b, c=c: ref._set_count(b, c),
                )
            elif kind == "revive" and b in ref:
                trial.same(
                    f"policy.revive({b})", lambda b=b: mine.revive(b), lambda b=b: ref.revive(b)
                )
            elif kind == "revive" and exact:
                refusal = InvalidBlock(f"block {b} is not evictable")
                trial.refuses(
                    f"policy.revive({b})",
                    lambda b=b: mine.revive(b),
                    refusal,
                    why=f"block {b} is not evictable: the caller's bug, never ignored",
                    also=(KeyError,),
                )
            elif kind == "forget":
                trial.same(
                    f"policy.forget({b})", lambda b=b: mine.forget(b), lambda b=b: ref.forget(b)
                )
            elif kind == "evict" and len(ref):
                _evict(trial, mine, ref, exact)
            else:
                continue
            trial.expect(
                "len(policy)",
                trial.read("len(policy)", lambda: len(mine)),
                len(ref),
                "len counts the evictable blocks",
            )
            for x in range(8):
                trial.expect(
                    f"{x} in policy",
                    trial.read(f"{x} in policy", lambda x=x: x in mine),
                    x in ref,
                    "`in` says whether a block is evictable",
                )
            for x in range(8) if exact else ():
                trial.expect(
                    f"policy.count({x})",
                    trial.read(f"policy.count({x})", lambda x=x: mine.count(x)),
                    ref.count(x),
                    _COUNT_HINT,
                )

    return play


_COUNT_HINT = (
    "only touch adds one (make_evictable and revive do not); a block evicted or forgotten "
    "starts again from 0; with a window, a touch leaving it takes one off its block's count "
    "unless that block has been evicted or forgotten since"
)


def _evict(trial: Trial, mine: Any, ref: LFU, exact: bool) -> None:
    if exact:
        trial.same(
            "policy.evict()",
            mine.evict,
            ref.evict,
            why="nothing is evictable",
            hint="the lowest count goes first, ties to the least recently touched; a count "
            "that changes moves an evictable block to the recent end of its new bucket",
        )
        return
    victim = trial.run("policy.evict()", mine.evict)
    if not isinstance(victim, int) or victim not in ref:
        trial.fail(
            causes.WRONG_RESULT,
            "return the victim itself (`return block`), one of the evictable blocks",
            line="policy.evict()",
            want=f"a block id, one of {sorted(b for b in range(8) if b in ref)}",
            got=repr(victim),
        )
    ref.forget(victim)


_SIZES = (200, 10_000)


def _populated(
    policy_cls: Any, check: str, kwargs: Callable[[int], dict[str, int]]
) -> Callable[[int], tuple[Any, int]]:
    """`n` cached blocks of many counts (a touch, then b % 10 hits each)."""

    def build(n: int) -> tuple[Any, int]:
        policy = call(f"policy = {_name(policy_cls)}()", _made, policy_cls, check, **kwargs(n))

        def fill() -> None:
            for b in range(n):
                policy.touch(b)
                policy.make_evictable(b)
                for _ in range(b % 10):
                    policy.revive(b)
                    policy.touch(b)
                    policy.make_evictable(b)

        call(f"caching {n:,} blocks", fill)
        return policy, n

    return build


def _rounds(policy: Any, n: int, rounds: int = 50) -> None:
    """Hit a cached block, evict one, cache a new block: the cache keeps its size."""
    for i in range(rounds):
        b = (i * 7919) % n
        if b in policy:
            policy.revive(b)
            policy.touch(b)
            policy.make_evictable(b)
        policy.evict()
        policy.touch(10 * n + i)
        policy.make_evictable(10 * n + i)


def _constant_work(policy_cls: Any, check: str, kwargs: Callable[[int], dict[str, int]]) -> None:
    """Hit / evict / insert rounds cost the same with 200 and 10,000 cached blocks; evicting
    from a high count costs what evicting from a low one does; nothing piles up."""
    build = _populated(policy_cls, check, kwargs)
    policies: dict[int, tuple[Any, int]] = {}
    for n in _SIZES:
        with stage(f"caching {n:,} blocks"):
            policies[n] = build(n)
    constant_work(
        policies.__getitem__,
        lambda p, n: call("50 hit / evict / insert rounds", _rounds, p, n),
        _SIZES,
        what="50 hit / evict / insert rounds",
        unit="cached blocks",
        hint="Every call must be O(1): no search over the blocks, even in C (min, sorted, "
        "`in` on a list).",
    )

    def filled(count: int) -> tuple[Any, int]:
        policy = call(f"policy = {_name(policy_cls)}()", _made, policy_cls, check, **kwargs(2_000))
        for b in range(20):
            for _ in range(count):
                call(f"policy.touch({b})", policy.touch, b)
            call(f"policy.make_evictable({b})", policy.make_evictable, b)
        return policy, count

    constant_work(
        filled,
        lambda p, c: call("10 evictions", lambda: [p.evict() for _ in range(10)]),
        (1, 255),
        what="10 evictions",
        unit="touches per evictable block",
        hint="Finding the lowest count must not walk up through the counts.",
        slack=200,
    )
    _no_garbage(policy_cls, check, kwargs(100))
    with stage(f"timing rounds with {_SIZES[0]:,} and {_SIZES[1]:,} cached blocks"):
        ratio = grows_in_time(policies.__getitem__, lambda s: _rounds(s[0], s[1], 30), _SIZES)
    if ratio is not None:
        raise CheckFailed(
            f"hit / evict / insert rounds took {ratio:,.0f}× longer with {_SIZES[1]:,} cached "
            f"blocks than with {_SIZES[0]:,} (the fastest of 3 rounds, measured twice): work "
            "that grows with the cache, where the counts cannot see it.",
            causes.WORK_GROWS,
        )


def _no_garbage(policy_cls: Any, check: str, kwargs: dict[str, int]) -> None:
    """While 20,000 more blocks pass through a cache of 100, then its blocks are hit 20,000
    times, the structures do not grow."""
    policy = call(f"policy = {_name(policy_cls)}()", _made, policy_cls, check, **kwargs)

    def churn(first: int, last: int) -> None:
        for b in range(first, last):
            policy.touch(b)
            if b % 3 == 0:
                policy.forget(b - 3)
            else:
                policy.make_evictable(b)
            if b % 5 == 0 and b - 10 in policy:
                policy.revive(b - 10)
                policy.touch(b - 10)
                policy.make_evictable(b - 10)
            while len(policy) > 100:
                policy.evict()

    def hits(n: int) -> None:
        for i in range(n):
            b = 29_990 + i % 10
            if b in policy:
                policy.revive(b)
                policy.touch(b)
                policy.make_evictable(b)

    with stage("20,000 blocks passing through a cache of 100"):
        call("blocks 0..9,999 passing through a cache of 100", churn, 0, 10_000)
        before = _sizes(policy)
        call("blocks 10,000..29,999 passing through a cache of 100", churn, 10_000, 30_000)
        call("20,000 hits on the cached blocks", hits, 20_000)
    grown = {key: n - before.get(key, 0) for key, n in _sizes(policy).items()}
    key = max(grown, key=lambda k: grown[k], default="")
    if key and grown[key] > 2_000:
        raise CheckFailed(
            causes.say(
                causes.UNBOUNDED_MEMORY,
                "Remove a block's entries when it is evicted or forgotten (a history of evicted "
                "blocks, such as ghosts, is trimmed to a fixed size), so memory is bounded by "
                "the cache and the window.",
                what=f"self.{key}",
                small=before.get(key, 0),
                large=before.get(key, 0) + grown[key],
                while_="20,000 more blocks passed through a cache of 100, then 20,000 hits",
            ),
            causes.UNBOUNDED_MEMORY,
        )


def _sizes(policy: Any) -> dict[str, int]:
    """Entries per attribute: a container's length, plus its items' for a list of them."""
    sizes = {}
    for key, value in vars(policy).items():
        try:
            n = len(value)
            if isinstance(value, list) and value and hasattr(value[0], "__len__"):
                n += sum(len(v) for v in value)
        except TypeError:
            continue
        sizes[key] = n
    return sizes


def _rules(policy_cls: Any, check: str, window: int = 0) -> None:
    """What random trials rarely do: evict with nothing evictable (InvalidBlock, never None),
    then once more after the last candidate went."""

    def scenario(trial: Trial) -> None:
        kwargs = {"window": window} if window else {}
        mine = trial.run(
            f"policy = {_name(policy_cls)}()", lambda: _made(policy_cls, check, **kwargs)
        )
        ref = AgingLFU(window) if window else LFU()
        _evict(trial, mine, ref, True)
        trial.same(
            "policy.make_evictable(4)",
            lambda: mine.make_evictable(4),
            lambda: ref.make_evictable(4),
        )
        _evict(trial, mine, ref, True)
        _evict(trial, mine, ref, True)

    fixed(scenario)


@exercise(1, "BucketLFU")
def check_lfu(lfu_cls: type, *, seed: int = 0) -> None:
    """`lfu_cls()` evicts like the library's `LFU`, in O(1) work with bounded structures."""
    with stage("random trials on 8 blocks"):
        search(
            _play(lfu_cls, "check_lfu", exact=True),
            _draw((*_KINDS, "set_count"), False),
            trials=150,
            seed=seed,
            what="check_lfu",
        )
    _constant_work(lfu_cls, "check_lfu", lambda n: {})
    _rules(lfu_cls, "check_lfu")
    passed("evicts like LFU on 100 random trials, in O(1) work, bounded")


@exercise(2, "WindowLFU")
def check_aging(aging_cls: type, *, seed: int = 1) -> None:
    """`aging_cls(window=w)` evicts like `AgingLFU(window=w)`, in O(1) work, bounded."""
    with stage("random trials on 8 blocks"):
        search(
            _play(aging_cls, "check_aging", exact=True),
            _draw(_KINDS, True),
            trials=150,
            seed=seed,
            what="check_aging",
        )
    _constant_work(aging_cls, "check_aging", lambda n: {"window": 4 * n})
    _rules(aging_cls, "check_aging", window=4)
    passed("ages like AgingLFU on 100 random trials, in O(1) work, bounded")


@exercise(3, "your own policy")
def check_policy_contract(policy_cls: type, *, seed: int = 2) -> None:
    """`policy_cls()` keeps the interface's promises (victims are evictable blocks returned as
    themselves, `len` and `in` exact), in O(1) work, and what it remembers stays bounded."""
    with stage("random trials on 8 blocks"):
        search(
            _play(policy_cls, "check_policy_contract", exact=False),
            _draw(_KINDS, False),
            trials=150,
            seed=seed,
            what="check_policy_contract",
        )
    _constant_work(policy_cls, "check_policy_contract", lambda n: {})
    passed("victims evictable, len and `in` exact on 100 random trials; O(1) work, bounded memory")
