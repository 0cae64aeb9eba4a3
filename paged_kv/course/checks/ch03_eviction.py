"""Chapter 03 checks: an eviction policy evicts like the library's LFU / aging LFU (or, for
the open exercise, keeps the policy contract), in O(1) work with bounded structures. Only
behaviour and counted work are checked, never a structure: any that is O(1) passes."""

from __future__ import annotations

import random
from functools import partial
from typing import Any

from paged_kv.cache.eviction import LFU, AgingLFU
from paged_kv.course.checks import causes
from paged_kv.course.checks.cost import constant_work, grows_in_time
from paged_kv.course.checks.failures import CheckFailed, call, exercise, passed, stage
from paged_kv.course.checks.harness import Trial, differential, fixed, intents, name_of, search
from paged_kv.errors import InvalidBlock

_KINDS = ("touch", "touch", "touch", "make_evictable", "revive", "forget", "evict", "evict")
_READS: list[Any] = [("len(policy)", len, "len counts the evictable blocks")]
_READS += [(f"{x} in policy", lambda p, x=x: x in p, "`in`: is it evictable") for x in range(8)]
_COUNT = (
    "only touch adds one (not make_evictable or revive); a block evicted or forgotten starts from "
    "0 again; a touch leaving the window takes one off its block's count unless it has gone since"
)
_COUNTS = [(f"policy.count({x})", lambda p, x=x: p.count(x), _COUNT) for x in range(8)]
_ORDER = (
    "the lowest count goes first, ties to the least recently touched; a count that changes "
    "moves an evictable block to the recent end of its new bucket"
)
_SET = (0, 1, 2, 254, 255, 300)  # the counts set_count sets


_RULES = [("evict", ()), ("make_evictable", (4,)), ("evict", ()), ("evict", ())]
_SIZES = (100, 5_000)  # cached blocks, once twice as many have passed through
_O1 = "Every call must be O(1): no search over the blocks, even in C (min, sorted, `in` on a list)."
_UP = "Finding the lowest count must not walk up through the counts."
_FORGET = "Drop a block's entries when it is evicted or forgotten; trim a history to a fixed size."


class _PolicyCheck:
    """One check of a learner's policy class: random calls, as `BlockPool` makes them, to it and
    to the library's policy, read back alike; the rules they leave out; the work; the memory."""

    def __init__(self, policy_cls: Any, check: str, *, exact: bool, aging: bool = False) -> None:
        if not callable(policy_cls):
            why = "pass your policy's class (such as `BucketLFU`), not an instance"
            message = causes.say(causes.BAD_SIGNATURE, doing=f"checks.{check}", why=why)
            raise CheckFailed(message, causes.BAD_SIGNATURE)
        self.cls: Any = policy_cls
        self.check, self.exact, self.aging = check, exact, aging
        self.name = name_of(policy_cls, "Policy")
        self.kinds = (*_KINDS, "set_count") if exact and not aging else _KINDS

    def run(self, seed: int) -> None:
        with stage("random trials on 8 blocks"):
            draw = intents(lambda rng: rng.randint(1, 6) if self.aging else 0, self.intent, 60)
            search(
                differential(self.start, self.step), draw, trials=150, seed=seed, what=self.check
            )
        self.costs()
        self.no_garbage()
        if self.exact:  # what random trials leave out: evict with nothing evictable, twice
            play = differential(self.start, partial(self.step, empty=True))
            fixed(partial(play, [4 if self.aging else 0, *_RULES]))

    def built(self, window: int, trial: Trial | None = None) -> Any:
        """The learner's policy (with `window` if it ages), built in `trial` or under `call`;
        its `key_of` names a block's content, so that a victim must be the block itself."""
        line = f"policy = {self.name}({f'window={window}' if self.aging else ''})"
        line += "; policy.key_of = lambda b: f'content-{b}'"
        return (trial.run if trial else call)(line, self._made, window)

    def _made(self, window: int) -> Any:
        policy = self.cls(window=window) if self.aging else self.cls()
        policy.key_of = lambda b: f"content-{b}"
        return policy

    def intent(self, rng: random.Random, window: int) -> tuple[str, tuple]:
        kind, block, count = rng.choice(self.kinds), rng.randrange(8), rng.choice(_SET)
        return kind, {"evict": (), "set_count": (block, count)}.get(kind, (block,))

    def start(self, window: int, trial: Trial) -> tuple[Any, LFU]:
        return self.built(window, trial), AgingLFU(window) if window else LFU()

    def step(self, trial: Trial, state: tuple, op: tuple, empty: bool = False) -> list | None:
        """One call on both policies, then the reads: the library's result or refusal, except a
        victim where not `exact` (any evictable block, as itself); an evict with nothing
        evictable only where `empty`, a revive of a block not evictable only where `exact`."""
        (mine, ref), (kind, args) = state, op
        stranger = kind == "revive" and args[0] not in ref
        if (kind == "evict" and not (len(ref) or empty)) or (stranger and not self.exact):
            return None
        line = f"policy.{kind}({', '.join(map(str, args))})"
        if stranger:
            refusal = InvalidBlock(f"block {args[0]} is not evictable")
            why = f"block {args[0]} is not evictable: the caller's bug, never ignored"
            trial.refuses(line, lambda: mine.revive(*args), refusal, why=why, also=(KeyError,))
        elif kind == "evict" and not self.exact:
            victim = trial.run(line, lambda: mine.evict())
            evictable = [b for b in range(8) if b in ref]
            if not isinstance(victim, int) or victim not in evictable:
                hint = "return the victim itself (`return block`), one of the evictable blocks"
                want = f"a block id, one of {evictable}"
                trial.fail(causes.WRONG_RESULT, hint, line=line, want=want, got=repr(victim))
            ref.forget(victim)
        else:
            theirs = partial(getattr(ref, "_set_count" if kind == "set_count" else kind), *args)
            hint, why = _ORDER if kind == "evict" else "", "nothing is evictable"
            trial.call("policy", mine, ref, kind, *args, theirs=theirs, why=why, hint=hint)
        reads = (_READS + _COUNTS) if self.exact else _READS
        return [(expr, partial(read, mine), read(ref), hint) for expr, read, hint in reads]

    def costs(self) -> None:
        """50 more blocks through a cache of 100 and one of 5,000 (the window 8 × the cache)
        cost the same work and time; evicting from count 255 costs what it does from count 1."""
        cached = {}
        for n in _SIZES:
            with stage(doing := f"{2 * n:,} blocks passing through a cache of {n:,}"):
                cached[n] = self.built(8 * n), range(20 * n, 20 * n + 50)
                call(doing, _churn, cached[n][0], range(2 * n), n)
        more = "50 more blocks passing through the cache"
        work = partial(call, more, _churn)
        constant_work(cached.__getitem__, work, _SIZES, what=more, unit="cached blocks", hint=_O1)
        ten = "10 evictions"
        evictions = partial(call, ten, lambda p, _: [p.evict() for _ in range(10)])
        constant_work(
            self._touched, evictions, (1, 255), what=ten, unit="touches each", hint=_UP, slack=200
        )
        churn = lambda c: _churn(c[0], c[1][:30])  # noqa: E731
        grows_in_time(cached.__getitem__, churn, _SIZES, what="30 blocks passing", unit="cached")

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
            call("blocks 0..9,999 passing", _churn, policy, range(10_000), 100)
            before = _sizes(policy)
            call("blocks 10,000..29,999 passing", _churn, policy, range(10_000, 30_000), 100)
            call("hitting the last blocks 2,000 times", _hit, policy, range(29_990, 30_000), 2_000)
        after = _sizes(policy)
        key = max(after, key=lambda k: after[k] - before.get(k, 0), default="")
        small, large = before.get(key, 0), after.get(key, 0)
        if large - small > 2_000:
            while_ = "20,000 more blocks passed through a cache of 100, then 2,000 hits on each"
            fields = {"what": f"self.{key}", "small": small, "large": large, "while_": while_}
            cause = causes.UNBOUNDED_MEMORY
            raise CheckFailed(causes.say(cause, _FORGET, **fields), cause)


def _hit(policy: Any, blocks: Any, times: int) -> None:
    """Each of `blocks` that is cached hit `times` times: back in use, touched, cached again."""
    for block in [b for b in blocks if b in policy] * times:
        policy.revive(block)
        policy.touch(block)
        policy.make_evictable(block)


def _churn(policy: Any, blocks: range, cache: int = 0) -> None:
    """`blocks` pass through a cache of `cache` (its size now, if 0): each block b is touched,
    every third forgets b - 3, the others are cached and hit b % 10 times."""
    cache = cache or len(policy)
    for b in blocks:
        policy.touch(b)
        if b % 3 == 0:
            policy.forget(b - 3)
        else:
            policy.make_evictable(b)
            _hit(policy, [b], b % 10)
        while len(policy) > cache:
            policy.evict()


def _sizes(policy: Any) -> dict[str, int]:
    """Entries per attribute: a container's length, plus its items' for a list of them."""
    sizes = {}
    for key, value in vars(policy).items():
        if hasattr(value, "__len__"):
            nested = isinstance(value, list) and value and hasattr(value[0], "__len__")
            sizes[key] = len(value) + (sum(map(len, value)) if nested else 0)
    return sizes


@exercise(1, "BucketLFU")
def check_lfu(lfu_cls: type, *, seed: int = 0) -> None:
    """`lfu_cls()` evicts like the library's `LFU`, in O(1) work with bounded structures."""
    _PolicyCheck(lfu_cls, "check_lfu", exact=True).run(seed)
    passed("evicts like LFU on 150 random trials, in O(1) work, bounded")


@exercise(2, "WindowLFU")
def check_aging(aging_cls: type, *, seed: int = 1) -> None:
    """`aging_cls(window=w)` evicts like `AgingLFU(window=w)`, in O(1) work, bounded."""
    _PolicyCheck(aging_cls, "check_aging", exact=True, aging=True).run(seed)
    passed("ages like AgingLFU on 150 random trials, in O(1) work, bounded")


@exercise(3, "your own policy")
def check_policy_contract(policy_cls: type, *, seed: int = 2) -> None:
    """`policy_cls()` keeps the interface's promises (victims are evictable blocks returned as
    themselves, `len` and `in` exact), in O(1) work, and what it remembers stays bounded."""
    _PolicyCheck(policy_cls, "check_policy_contract", exact=False).run(seed)
    passed("victims evictable, len and `in` exact on 150 random trials; O(1) work, bounded memory")
