"""Exercise 2 of chapter 07: the learner's run across tiers takes each block from the first
tier (fastest first) that holds the next one, all the blocks that tier holds in a row, stops at
the first gap, never asks a slower tier needlessly, and leaves the caller's keys alone.

The tiers count the questions they are asked: a loop that would never end is stopped after
more questions than any correct solution asks (or more Python lines than one runs), with a
message instead of a hang.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Sequence
from typing import Any

from paged_kv.course.checks.failures import (
    CheckFailed,
    exercise,
    expect,
    learner_error,
    passed,
    short_repr,
)
from paged_kv.tiers.store import longest_run

_LINES = 200_000  # Python lines one call may run; a correct solution runs a few dozen
_RULE = (
    "ask the tiers in order (fastest first) about all the keys not covered yet, "
    "tier.count_leading(keys[len(sources):]); the first that answers n > 0 supplies the next "
    "n blocks, all of them (sources += [tier] * n); then ask again, from the fastest tier; "
    "stop when no tier has the next block"
)


class _Stuck(BaseException):
    """Stops a loop that would never end; not an Exception, so that `except Exception` in the
    learner's code cannot swallow it."""


class _Budget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.calls = 0


class _Tier:
    """A tier that holds some keys and counts the `count_leading` questions it is asked."""

    def __init__(self, name: str, keys: Sequence[str], budget: _Budget | None = None) -> None:
        self.name = name
        self.keys = set(keys)
        self.calls = 0
        self.budget = budget or _Budget(10**9)

    def count_leading(self, keys: Sequence[str]) -> int:
        if isinstance(keys, str | bytes):
            raise CheckFailed(
                f"{self.name}.count_leading({keys!r}): count_leading takes a list of keys and "
                "answers how many of them, from the first, the tier holds; ask about all the "
                "keys left, tier.count_leading(keys[len(sources):])."
            )
        self.calls += 1
        self.budget.calls += 1
        if self.budget.calls > self.budget.limit:
            raise _Stuck
        n = 0
        for key in keys:
            if key not in self.keys:
                break
            n += 1
        return n

    def __repr__(self) -> str:
        return self.name


def _scene(tiers: Sequence[_Tier], keys: Sequence[str]) -> str:
    held = [f"{t.name} holding {' '.join(k for k in keys if k in t.keys) or 'none'}" for t in tiers]
    return ", ".join(held) or "no tiers"


def _run(fn: Callable[..., Any], keys: list[str], tiers: list[_Tier]) -> list[_Tier]:
    """The learner's run of `keys` over `tiers`, checked for hangs, for changes to its
    arguments and for the type of what it returns."""
    budget = _Budget(3 * (len(keys) + 1) * max(len(tiers), 1) + 3)
    for tier in tiers:
        tier.budget = budget
    given, given_tiers = list(keys), list(tiers)
    doing = f"my_longest_run({keys}, {tiers}) with {_scene(tiers, keys)}"
    try:
        got = _within_lines(lambda: fn(given, given_tiers))
    except _Stuck:
        spun = (
            f"asked the tiers {budget.calls} times without returning, and a correct solution "
            f"asks at most {(len(keys) + 1) * len(tiers)}"
            if budget.calls > budget.limit
            else f"ran {_LINES:,} lines without returning"
        )
        raise CheckFailed(
            f"{doing}: your function {spun}. Each round must take all n blocks of the first "
            "tier that answers n > 0 (sources += [tier] * n), and when no tier has the next "
            "block (or there are no tiers) the run is over: break out of the loop."
        ) from None
    except (CheckFailed, NotImplementedError):
        raise
    except Exception as exc:
        raise learner_error(exc, doing=doing) from None
    expect(
        given == keys,
        f"{doing}: your function changed the list of keys it was given ({len(keys)} keys "
        f"before the call, {len(given)} after): the caller reads those blocks next; ask about "
        "a slice, keys[len(sources):], and leave keys as it is.",
    )
    expect(given_tiers == tiers, f"{doing}: your function changed the list of tiers; leave it.")
    _expect_tiers(got, tiers, doing)
    return got


def _within_lines(action: Callable[[], Any]) -> Any:
    lines = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal lines
        if event == "line":
            lines += 1
            if lines > _LINES:
                raise _Stuck
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        return action()
    finally:
        sys.settrace(previous)


def _expect_tiers(got: Any, tiers: list[_Tier], doing: str) -> None:
    expect(
        not isinstance(got, tuple),
        f"{doing}: your function returned a tuple, {short_repr(got)}; return a list "
        "(sources = [] ... return sources), one tier per block.",
    )
    expect(
        isinstance(got, list),
        f"{doing}: your function returned {short_repr(got)}; return a list with one tier per "
        "block of the run.",
    )
    for x in got:
        if any(x is t for t in tiers):
            continue
        expect(
            not isinstance(x, str),
            f"{doing}: your function returned tier names, {short_repr(got)}; return the tier "
            "objects themselves (sources += [tier] * n): the store reads each block with its "
            "tier's get_many.",
        )
        expect(
            not (isinstance(x, tuple | list) and len(x) == 2),
            f"{doing}: your function returned pairs, {short_repr(got)}; return one tier per "
            "block of the run (sources += [tier] * n), so that the list is as long as the run.",
        )
        raise CheckFailed(
            f"{doing}: your function returned {short_repr(got)}, and {short_repr(x)} is not "
            "one of the tiers it was given; return the tier objects, one per block of the run."
        )


def _per_block(keys: Sequence[str], tiers: Sequence[_Tier]) -> list[_Tier]:
    """Each block from the fastest tier that holds it: the mistake of asking one at a time."""
    out = []
    for key in keys:
        tier = next((t for t in tiers if key in t.keys), None)
        if tier is None:
            break
        out.append(tier)
    return out


def _why(got: list[_Tier], want: list[_Tier], keys: Sequence[str], tiers: list[_Tier]) -> str:
    if got == _per_block(keys, tiers):
        return (
            "you took each block from the fastest tier that holds it, but the first tier "
            "holding the next block supplies its whole run of n blocks, even those a faster "
            "tier also holds (one read from one tier instead of a round trip per block): " + _RULE
        )
    if len(got) > len(want):
        return (
            f"the run ends at {keys[len(want)]}, which no tier holds: the blocks after a gap "
            "are useless without it"
        )
    if got == want[: len(got)]:
        return (
            f"the run stops too early: after {len(got)} block(s), {want[len(got)].name} still "
            f"holds {keys[len(got)]}; " + _RULE
        )
    return _RULE


def _expect_run(fn: Callable[..., Any], keys: list[str], tiers: list[_Tier], told: str) -> None:
    want = longest_run(keys, tiers)  # type: ignore[arg-type]
    got = _run(fn, keys, tiers)
    if got != want:
        raise CheckFailed(
            f"{_scene(tiers, keys)}: {told}expected {want}, got {got}: "
            f"{_why(got, want, keys, tiers)}."
        )


@exercise(2, "my_longest_run")
def check_longest_run(fn: Callable[[list[str], list[Any]], list[Any]]) -> None:
    """`fn(keys, tiers)` returns a list with the tier object to read each block of the longest
    run of `keys` from: the first tier holding the next block supplies all the blocks it holds
    in a row; the run stops at the first gap."""
    keys = [f"k{i}" for i in range(8)]
    host, disk = _Tier("host", ["k0", "k3"]), _Tier("disk", keys[:3])
    remote = _Tier("remote", ["k4", "k6", "k7"])
    _expect_run(
        fn,
        keys,
        [host, disk, remote],
        "the run is k0 from host (the fastest tier that has it), k1 k2 from disk, k3 from host, "
        "k4 from remote, and it stops at k5, which no tier holds, although k6 and k7 are "
        "present (without k5 they are useless): ",
    )
    tiers = [_Tier("host", ["k0", "k3"]), _Tier("disk", keys[:4]), _Tier("remote", ["k4", "k5"])]
    _expect_run(
        fn,
        keys,
        tiers,
        "k0 comes from host; then disk is the first tier that holds k1, and it answers 3 (k1 k2 "
        "k3), so it supplies all 3, k3 too although host has it (one read instead of two "
        "round trips); k4 k5 come from remote, and k6 is missing: ",
    )
    expect(_run(fn, [], [_Tier("host", keys)]) == [], "an empty list of keys gives [].")
    expect(_run(fn, keys, []) == [], "with no tiers nothing is found: the run is [].")
    expect(
        _run(fn, keys[5:], [host, disk, remote]) == [],
        "a run that starts with a key no tier holds (k5 here) is empty: [].",
    )
    lazy = [_Tier("host", keys[:6]), _Tier("disk", keys)]
    _run(fn, keys[:6], lazy)
    expect(
        lazy[1].calls == 0,
        "when the first tier holds the whole run, the slower tiers must not be asked at all "
        "(each remote question is a round trip).",
    )
    rng = random.Random(5)
    for trial in range(200):
        ks = [f"x{trial}-{i}" for i in range(rng.randint(0, 10))]
        tiers = [
            _Tier(name, [k for k in ks if rng.random() < 0.5])
            for name in rng.sample(["host", "disk", "remote"], rng.randint(1, 3))
        ]
        _expect_run(fn, ks, tiers, "")
    passed("the longest run across tiers, whole runs from the first tier, stopping at the gap")
