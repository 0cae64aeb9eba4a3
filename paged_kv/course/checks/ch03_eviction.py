"""Chapter 03 checks: an eviction policy evicts like the library's LFU / aging LFU (or, for
the open exercise, keeps the policy contract), in O(1) work with bounded structures.

Random calls, as `BlockPool` makes them, go to the learner's policy and to the library's; every
victim, `len`, `in` and count must agree. The policy's `key_of` names each block's content apart
from its id, so a victim must be the block itself. Only behaviour and counted work are checked,
never a structure: any that is O(1) passes.
"""

from __future__ import annotations

import random
from functools import partial
from typing import Any

from paged_kv.cache.eviction import LFU, AgingLFU
from paged_kv.course.checks import causes
from paged_kv.course.checks.cost import constant_work, grows_in_time
from paged_kv.course.checks.failures import CheckFailed, call, exercise, passed, stage
from paged_kv.course.checks.harness import Trial, fixed, search
from paged_kv.errors import InvalidBlock

_KINDS = ("touch", "touch", "touch", "make_evictable", "revive", "forget", "evict", "evict")
_IN = "`in` says whether a block is evictable"
_READS: list[Any] = [("len(policy)", len, "len counts the evictable blocks")]
_READS += [(f"{x} in policy", lambda p, x=x: x in p, _IN) for x in range(8)]
_COUNT = (
    "only touch adds one (make_evictable and revive do not); a block evicted or forgotten "
    "starts again from 0; with a window, a touch leaving it takes one off its block's count "
    "unless that block has been evicted or forgotten since"
)
_COUNTS = [(f"policy.count({x})", lambda p, x=x: p.count(x), _COUNT) for x in range(8)]
_ORDER = (
    "the lowest count goes first, ties to the least recently touched; a count that changes "
    "moves an evictable block to the recent end of its new bucket"
)
# What random trials leave out: evict with nothing evictable (InvalidBlock, never None), then
# once more after the last candidate went.
_RULES = [("evict", 0, 0), ("make_evictable", 4, 0), ("evict", 0, 0), ("evict", 0, 0)]
_SIZES = (200, 10_000)  # blocks passing through a cache of half as many
_O1 = "Every call must be O(1): no search over the blocks, even in C (min, sorted, `in` on a list)."
_FORGET = (
    "Remove a block's entries when it is evicted or forgotten (a history of evicted blocks, "
    "such as ghosts, is trimmed to a fixed size), so memory is bounded by the cache and the "
    "window."
)


class _Learner:
    """The learner's policy class under check: built with a window when it ages, and a `key_of`
    that names each block's content apart from its id."""

    def __init__(self, policy_cls: Any, check: str, aging: bool) -> None:
        if not callable(policy_cls):
            why = "pass your policy's class (such as `BucketLFU`), not an instance"
            message = causes.say(causes.BAD_SIGNATURE, doing=f"checks.{check}", why=why)
            raise CheckFailed(message, causes.BAD_SIGNATURE)
        self.cls: Any = policy_cls
        self.aging = aging
        self.name = getattr(getattr(policy_cls, "func", policy_cls), "__name__", "Policy")

    def built(self, window: int, trial: Trial | None = None) -> Any:
        """A policy, built in `trial` (or under `call`)."""
        line = f"policy = {self.name}({f'window={window}' if self.aging else ''})"
        if trial is None:
            return call(line, self._made, window)
        return trial.run(f"{line}; policy.key_of = lambda b: f'content-{{b}}'", self._made, window)

    def _made(self, window: int) -> Any:
        policy = self.cls(window=window) if self.aging else self.cls()
        policy.key_of = lambda b: f"content-{b}"
        return policy

    def play(self, exact: bool, ops: list[Any], trial: Trial, empty: bool = False) -> None:
        """The operations on a policy and on the library's LFU (aging with a window), `len`,
        `in` and (`exact`) every count read back after each. An evict with nothing evictable
        is played only where `empty`, a revive of a block not evictable only where `exact`."""
        window, *calls = ops
        mine, ref = self.built(window, trial), AgingLFU(window) if window else LFU()
        for kind, b, c in calls:
            skip = kind == "evict" and not (len(ref) or empty)
            if skip or (kind == "revive" and b not in ref and not exact):
                continue
            _apply(
                trial, mine, ref, exact, kind, {"evict": (), "set_count": (b, c)}.get(kind, (b,))
            )
            for expr, read, hint in (_READS + _COUNTS) if exact else _READS:
                trial.expect(expr, trial.read(expr, lambda r=read: r(mine)), read(ref), hint)

    def costs(self) -> None:
        """50 more blocks passing through a cache of 100 and one of 5,000 (of counts 1 to 10,
        the window 4 × the blocks) cost the same work, and time; evicting from count 255
        costs what evicting from count 1 does."""
        cached = {}
        for n in _SIZES:
            with stage(doing := f"{n:,} blocks passing through a cache of {n // 2:,}"):
                cached[n] = self.built(4 * n), n
                call(doing, _churn, cached[n][0], n // 2, range(n))
        through = "50 more blocks passing through the cache"
        work = partial(call, through, _more)
        constant_work(cached.__getitem__, work, _SIZES, what=through, unit="blocks", hint=_O1)
        steps = "Finding the lowest count must not walk up through the counts."
        evictions = partial(call, "10 evictions", lambda p, _: [p.evict() for _ in range(10)])
        touches = (1, 255)
        constant_work(
            self._touched,
            evictions,
            touches,
            what="10 evictions",
            unit="touches a block",
            hint=steps,
            slack=200,
        )
        with stage("timing 30 blocks passing through caches of 100 and 5,000"):
            ratio = grows_in_time(cached.__getitem__, lambda c: _more(c[0], c[1], 30), _SIZES)
        if ratio is not None:
            message = (
                f"30 blocks took {ratio:,.0f}× longer to pass through a cache of 5,000 than "
                "one of 100 (the fastest of 3 rounds, measured twice): work that grows with "
                "the cache, where the counts cannot see it."
            )
            raise CheckFailed(message, causes.WORK_GROWS)

    def _touched(self, count: int) -> tuple[Any, int]:
        policy = self.built(8_000)  # a window that keeps every touch
        for b in range(20):
            call(f"touching {b} {count} times", lambda b=b: [policy.touch(b) for _ in range(count)])
            call(f"policy.make_evictable({b})", policy.make_evictable, b)
        return policy, count

    def no_garbage(self) -> None:
        """While 20,000 more blocks pass through a cache of 100 (the window 400), then its last
        blocks are hit 2,000 times each, no container grows by more than 2,000 entries."""
        policy = self.built(400)
        with stage("20,000 blocks passing through a cache of 100"):
            call(
                "blocks 0..9,999 passing through a cache of 100", _churn, policy, 100, range(10_000)
            )
            before = _sizes(policy)
            call("blocks 10,000..29,999 passing", _churn, policy, 100, range(10_000, 30_000))
            last = range(29_990, 30_000)
            call(
                "2,000 hits on each of the last blocks",
                lambda: [_hit(policy, b, 2_000) for b in last if b in policy],
            )
        after = _sizes(policy)
        key = max(after, key=lambda k: after[k] - before.get(k, 0), default="")
        small, large = before.get(key, 0), after.get(key, 0)
        if large - small > 2_000:
            while_ = "20,000 more blocks passed through a cache of 100, then 2,000 hits on each"
            fields = {"what": f"self.{key}", "small": small, "large": large, "while_": while_}
            cause = causes.UNBOUNDED_MEMORY
            raise CheckFailed(causes.say(cause, _FORGET, **fields), cause)


def _apply(trial: Trial, mine: Any, ref: LFU, exact: bool, kind: str, args: tuple) -> None:
    """One call on both policies; `exact`: the same victim or refusal, else any victim that is
    evictable, returned as itself."""
    line = f"policy.{kind}({', '.join(map(str, args))})"
    if kind == "revive" and args[0] not in ref:
        refusal = InvalidBlock(f"block {args[0]} is not evictable")
        why = f"block {args[0]} is not evictable: the caller's bug, never ignored"
        trial.refuses(line, lambda: mine.revive(*args), refusal, why=why, also=(KeyError,))
    elif kind == "evict" and exact:
        trial.same(line, lambda: mine.evict(), ref.evict, why="nothing is evictable", hint=_ORDER)
    elif kind == "evict":
        victim, evictable = trial.run(line, lambda: mine.evict()), [b for b in range(8) if b in ref]
        if not isinstance(victim, int) or victim not in evictable:
            hint = "return the victim itself (`return block`), one of the evictable blocks"
            want = f"a block id, one of {evictable}"
            trial.fail(causes.WRONG_RESULT, hint, line=line, want=want, got=repr(victim))
        ref.forget(victim)
    else:
        theirs = getattr(ref, "_set_count" if kind == "set_count" else kind)
        trial.same(line, lambda: getattr(mine, kind)(*args), lambda: theirs(*args))


def _hit(policy: Any, block: int, times: int) -> None:
    """A cached block hit `times` times: back in use, touched, cached again."""
    for _ in range(times):
        policy.revive(block)
        policy.touch(block)
        policy.make_evictable(block)


def _churn(policy: Any, cache: int, blocks: range) -> None:
    """`blocks` pass through a cache of `cache` blocks: block b is touched, then every third
    forgets the block three before it, the others are cached and hit b % 10 times; every
    fifth also hits the block ten before it."""
    for b in blocks:
        policy.touch(b)
        if b % 3 == 0:
            policy.forget(b - 3)
        else:
            policy.make_evictable(b)
            _hit(policy, b, b % 10)
        if b % 5 == 0 and b - 10 in policy:
            _hit(policy, b - 10, 1)
        while len(policy) > cache:
            policy.evict()


def _more(policy: Any, n: int, blocks: int = 50) -> None:
    """`blocks` more blocks pass through the cache of n // 2 that n blocks went through."""
    _churn(policy, n // 2, range(10 * n, 10 * n + blocks))


def _sizes(policy: Any) -> dict[str, int]:
    """Entries per attribute: a container's length, plus its items' for a list of them."""
    sizes = {}
    for key, value in vars(policy).items():
        if hasattr(value, "__len__"):
            nested = isinstance(value, list) and value and hasattr(value[0], "__len__")
            sizes[key] = len(value) + (sum(map(len, value)) if nested else 0)
    return sizes


def _check(policy_cls: Any, check: str, seed: int, *, exact: bool, aging: bool = False) -> None:
    """Random trials against the library's policy, the cost of the learner's, then (`exact`)
    the rules the random trials leave out."""
    learner = _Learner(policy_cls, check, aging)
    kinds = (*_KINDS, "set_count") if exact and not aging else _KINDS
    draw = partial(_draw, kinds, aging)
    with stage("random trials on 8 blocks"):
        search(partial(learner.play, exact), draw, trials=150, seed=seed, what=check)
    learner.costs()
    learner.no_garbage()
    if exact:
        fixed(partial(learner.play, True, [4 if aging else 0, *_RULES], empty=True))


def _draw(kinds: tuple[str, ...], aging: bool, rng: random.Random) -> list[Any]:
    window = rng.randint(1, 6) if aging else 0
    counts = [0, 1, 2, 254, 255, 300]
    return [window] + [(rng.choice(kinds), rng.randrange(8), rng.choice(counts)) for _ in range(60)]


@exercise(1, "BucketLFU")
def check_lfu(lfu_cls: type, *, seed: int = 0) -> None:
    """`lfu_cls()` evicts like the library's `LFU`, in O(1) work with bounded structures."""
    _check(lfu_cls, "check_lfu", seed, exact=True)
    passed("evicts like LFU on 150 random trials, in O(1) work, bounded")


@exercise(2, "WindowLFU")
def check_aging(aging_cls: type, *, seed: int = 1) -> None:
    """`aging_cls(window=w)` evicts like `AgingLFU(window=w)`, in O(1) work, bounded."""
    _check(aging_cls, "check_aging", seed, exact=True, aging=True)
    passed("ages like AgingLFU on 150 random trials, in O(1) work, bounded")


@exercise(3, "your own policy")
def check_policy_contract(policy_cls: type, *, seed: int = 2) -> None:
    """`policy_cls()` keeps the interface's promises (victims are evictable blocks returned as
    themselves, `len` and `in` exact), in O(1) work, and what it remembers stays bounded."""
    _check(policy_cls, "check_policy_contract", seed, exact=False)
    passed("victims evictable, len and `in` exact on 150 random trials; O(1) work, bounded memory")
