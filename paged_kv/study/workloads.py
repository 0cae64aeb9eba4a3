"""Seeded synthetic traces of block accesses, each built to show a policy's strength or flaw.

A trace is a list of block keys (ints) in access order: what a prefix cache sees as requests
arrive and reuse (or not) the KV blocks of earlier ones. Labelled synthetic; every generator
takes a seed and returns the same trace for the same arguments.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from paged_kv.errors import InvalidArgument
from paged_kv.validation import require_positive_int


def _zipf_weights(n: int, alpha: float) -> np.ndarray:
    """P(rank r) for ranks 0..n-1, proportional to 1 / (r + 1)^alpha."""
    weights = 1.0 / np.arange(1, n + 1) ** alpha
    return weights / weights.sum()


def _zipf_choices(rng: np.random.Generator, n: int, size: int, alpha: float) -> np.ndarray:
    """`size` draws from ranks 0..n-1 with P(rank r) proportional to 1 / (r + 1)^alpha."""
    return rng.choice(n, size=size, p=_zipf_weights(n, alpha))


class _Keys:
    """Hands out fresh block keys for blocks that are never shared."""

    def __init__(self, start: int) -> None:
        self.next = start

    def take(self, n: int) -> list[int]:
        keys = list(range(self.next, self.next + n))
        self.next += n
        return keys


@dataclass(frozen=True)
class RatedTrace:
    """A trace and the generator's true popularity of its blocks as it unfolds (for oracles).

    `changes[i] = (position, key, rate)`: from access `position` on, `key` is read by the next
    request with probability `rate` (what the generator knows then, not its later draws;
    `math.inf` for a block the request being served still has to read). Sorted by position.
    """

    keys: list[int]
    changes: list[tuple[int, int, float]]
    phase_starts: tuple[int, ...] = ()
    """Positions where the popular set is replaced wholesale (shifting popularity): the
    generator's rules fix them, so an observer that knows the rules knows them too."""
    chat: ChatView | None = None
    """For multi-turn chat: its requests as an observer sees them, and the rules."""
    request_starts: tuple[int, ...] = ()
    """Where each request (a scan included) starts in `keys`: for `serve_requests`."""


@dataclass(frozen=True)
class Turn:
    """One request of a multi-turn chat as it arrives: which session, which system prompt."""

    start: int  # position of its first block in the trace
    session: int  # sessions are numbered as they open
    prompt: int
    opens: bool  # the session's first turn


@dataclass(frozen=True)
class ChatView:
    """What an observer of `multi_turn_chat` can know without its draws: each turn, the rules
    (`active_sessions`, `mean_turns`, `system_blocks`), and, told, each system prompt's Zipf
    weight (an online policy would have to learn those)."""

    turns: tuple[Turn, ...]
    active_sessions: int
    mean_turns: float
    system_blocks: int
    prompt_weights: tuple[float, ...]


class _Builder:
    """Appends requests to a trace and records the rate of each block read, after its read."""

    def __init__(self) -> None:
        self.keys: list[int] = []
        self.changes: list[tuple[int, int, float]] = []
        self.starts: list[int] = []

    def request(self, keys: list[int], rate_after: list[float]) -> None:
        """A request reads `keys` in order; each is then read by a later one at its rate."""
        start = len(self.keys)
        self.starts.append(start)
        self.changes += [(start, k, math.inf) for k in keys]  # the request still reads them
        pairs = enumerate(zip(keys, rate_after, strict=True), start=start + 1)
        self.changes += [(after, k, rate) for after, (k, rate) in pairs]
        self.keys += keys

    def set_rates(self, keys: range, rate: float) -> None:
        """From now on `keys` are read by the next request with probability `rate`."""
        self.changes += [(len(self.keys), k, rate) for k in keys]

    def rated(self, phase_starts: tuple[int, ...] = (), chat: ChatView | None = None) -> RatedTrace:
        changes = sorted(self.changes, key=lambda c: c[0])
        return RatedTrace(self.keys, changes, phase_starts, chat, tuple(self.starts))


def shared_prefixes(
    num_requests: int = 2000,
    *,
    num_prefixes: int = 200,
    prefix_blocks: int = 4,
    unique_blocks: int = 2,
    alpha: float = 1.1,
    seed: int = 0,
) -> list[int]:
    """Requests that start with a popular shared prefix, then blocks of their own.

    Models system prompts, few-shot templates and RAG documents: a few prefixes are very
    popular (Zipf with exponent `alpha`), most are rare, and each request's own tokens
    (`unique_blocks`) are never reused. Frequency matters more than recency here.
    """
    return rated_shared_prefixes(
        num_requests, num_prefixes=num_prefixes, prefix_blocks=prefix_blocks,
        unique_blocks=unique_blocks, alpha=alpha, seed=seed,
    ).keys  # fmt: skip


def rated_shared_prefixes(
    num_requests: int = 2000,
    *,
    num_prefixes: int = 200,
    prefix_blocks: int = 4,
    unique_blocks: int = 2,
    alpha: float = 1.1,
    seed: int = 0,
    scan_every: int = 0,
    scan_blocks: int = 0,
) -> RatedTrace:
    """`shared_prefixes` with its rates; with `scan_every`, `prefixes_with_scans`'s."""
    require_positive_int("num_requests", num_requests)
    rng = np.random.default_rng(seed)
    build = _Builder()
    fresh = _Keys(num_prefixes * prefix_blocks)
    scans = _Keys(num_prefixes * prefix_blocks + num_requests * unique_blocks)

    def scan_before(r: int) -> None:
        if scan_every and r and r % scan_every == 0:
            build.request(scans.take(scan_blocks), [0.0] * scan_blocks)

    _requests(
        build, rng, fresh, 0, num_prefixes, num_requests, prefix_blocks, unique_blocks, alpha,
        scan_before,
    )  # fmt: skip
    return build.rated()


def _requests(
    build: _Builder,
    rng: np.random.Generator,
    fresh: _Keys,
    first_prefix: int,
    num_prefixes: int,
    num_requests: int,
    prefix_blocks: int,
    unique_blocks: int,
    alpha: float,
    before: Callable[[int], None] = lambda _r: None,
) -> None:
    """`num_requests` requests: a Zipf-chosen prefix among prefixes first_prefix.. + own blocks.

    A prefix block is read by the next request with its prefix's Zipf weight, an own block
    never; `before(r)` runs before request r (to slip scans in)."""
    weights = _zipf_weights(num_prefixes, alpha)
    for r, p in enumerate(_zipf_choices(rng, num_prefixes, num_requests, alpha)):
        before(r)
        first = (first_prefix + int(p)) * prefix_blocks
        rate = float(weights[p])
        build.request(
            [*range(first, first + prefix_blocks), *fresh.take(unique_blocks)],
            [rate] * prefix_blocks + [0.0] * unique_blocks,
        )


def prefixes_with_scans(
    num_requests: int = 2000,
    *,
    scan_every: int = 50,
    scan_blocks: int = 300,
    num_prefixes: int = 200,
    prefix_blocks: int = 4,
    unique_blocks: int = 2,
    alpha: float = 1.1,
    seed: int = 0,
) -> list[int]:
    """`shared_prefixes`, plus before every `scan_every`-th request a one-off scan.

    Models a long document summarised once: `scan_blocks` blocks arrive in a burst and are
    never seen again. A scan longer than the cache flushes an LRU of every hot prefix; LFU
    keeps them.
    """
    return rated_prefixes_with_scans(
        num_requests, scan_every=scan_every, scan_blocks=scan_blocks, num_prefixes=num_prefixes,
        prefix_blocks=prefix_blocks, unique_blocks=unique_blocks, alpha=alpha, seed=seed,
    ).keys  # fmt: skip


def rated_prefixes_with_scans(
    num_requests: int = 2000,
    *,
    scan_every: int = 50,
    scan_blocks: int = 300,
    num_prefixes: int = 200,
    prefix_blocks: int = 4,
    unique_blocks: int = 2,
    alpha: float = 1.1,
    seed: int = 0,
) -> RatedTrace:
    """`prefixes_with_scans` with its rates (a scanned block is never read again)."""
    require_positive_int("scan_every", scan_every)
    return rated_shared_prefixes(
        num_requests, num_prefixes=num_prefixes, prefix_blocks=prefix_blocks,
        unique_blocks=unique_blocks, alpha=alpha, seed=seed, scan_every=scan_every,
        scan_blocks=scan_blocks,
    )  # fmt: skip


def shifting_popularity(
    num_requests: int = 3000,
    *,
    phases: int = 3,
    num_prefixes: int = 100,
    prefix_blocks: int = 4,
    unique_blocks: int = 2,
    alpha: float = 1.1,
    seed: int = 0,
) -> list[int]:
    """Shared prefixes whose popular set changes completely at each of `phases` phases.

    Models a service whose traffic moves on (yesterday's system prompt retired, a new RAG
    corpus). Plain LFU keeps the formerly hot blocks on their old counts; aging lets them go.
    """
    return rated_shifting_popularity(
        num_requests, phases=phases, num_prefixes=num_prefixes, prefix_blocks=prefix_blocks,
        unique_blocks=unique_blocks, alpha=alpha, seed=seed,
    ).keys  # fmt: skip


def rated_shifting_popularity(
    num_requests: int = 3000,
    *,
    phases: int = 3,
    num_prefixes: int = 100,
    prefix_blocks: int = 4,
    unique_blocks: int = 2,
    alpha: float = 1.1,
    seed: int = 0,
) -> RatedTrace:
    """`shifting_popularity` with its rates: a phase's prefixes fall to 0 when it ends."""
    require_positive_int("phases", phases)
    rng = np.random.default_rng(seed)
    build = _Builder()
    fresh = _Keys(phases * num_prefixes * prefix_blocks)
    blocks = num_prefixes * prefix_blocks
    starts = []
    for phase in range(phases):  # a new family of prefixes each phase
        starts.append(len(build.keys))
        build.set_rates(range((phase - 1) * blocks, phase * blocks), 0.0)  # the old family
        _requests(
            build, rng, fresh, phase * num_prefixes, num_prefixes, num_requests // phases,
            prefix_blocks, unique_blocks, alpha,
        )  # fmt: skip
    return build.rated(phase_starts=tuple(starts[1:]))


def multi_turn_chat(
    num_requests: int = 3000,
    *,
    num_system_prompts: int = 1000,
    system_blocks: int = 4,
    alpha: float = 1.0,
    mean_turns: float = 4.0,
    active_sessions: int = 8,
    user_blocks: int = 1,
    answer_blocks: int = 1,
    seed: int = 0,
) -> list[int]:
    """Multi-turn chats over a long tail of system prompts, as block accesses.

    Each session opens with one of `num_system_prompts` system prompts (Zipf with exponent
    `alpha`: a few are everywhere, most belong to one small app and are seldom seen again) and
    lasts a geometric number of turns (mean `mean_turns`). `active_sessions` sessions run at
    once; each request is a turn of one of them, drawn at random. A turn reads the system
    prompt and the session's whole history (earlier turns' blocks), then brings `user_blocks`
    new blocks and its answer's `answer_blocks`, which the session's next turn reads again.
    When a session ends, a new one opens. Recency (histories) and frequency (system prompts)
    both matter here, with a long tail of one-off system prompts in between.
    """
    return rated_multi_turn_chat(
        num_requests, num_system_prompts=num_system_prompts, system_blocks=system_blocks,
        alpha=alpha, mean_turns=mean_turns, active_sessions=active_sessions,
        user_blocks=user_blocks, answer_blocks=answer_blocks, seed=seed,
    ).keys  # fmt: skip


def rated_multi_turn_chat(
    num_requests: int = 3000,
    *,
    num_system_prompts: int = 1000,
    system_blocks: int = 4,
    alpha: float = 1.0,
    mean_turns: float = 4.0,
    active_sessions: int = 8,
    user_blocks: int = 1,
    answer_blocks: int = 1,
    seed: int = 0,
) -> RatedTrace:
    """`multi_turn_chat` with its rates, from the state a live generator holds.

    An open session's blocks are read by the next request with probability 1/active_sessions
    (the oracle knows whether the session has a turn left: its length was drawn when it
    opened); a system prompt's with 1/active_sessions per open session using it, plus its Zipf
    weight times the chance that a new session opens (1/mean_turns). Future draws stay unknown.
    """
    require_positive_int("num_requests", num_requests)
    require_positive_int("active_sessions", active_sessions)
    if not mean_turns >= 1:
        raise InvalidArgument(f"mean_turns must be at least 1, got {mean_turns!r}.")
    rng = np.random.default_rng(seed)
    build = _Builder()
    fresh = _Keys(num_system_prompts * system_blocks)
    weights = _zipf_weights(num_system_prompts, alpha)
    prompts = iter(_zipf_choices(rng, num_system_prompts, num_requests + active_sessions, alpha))
    users: dict[int, int] = {}  # system prompt -> open sessions that read it

    def prompt_rate(prompt: int) -> float:
        return users.get(prompt, 0) / active_sessions + float(weights[prompt]) / mean_turns

    opened = iter(range(num_requests + active_sessions))
    turns: list[Turn] = []

    def open_session() -> tuple[int, int, list[int], int]:
        prompt = int(next(prompts))
        users[prompt] = users.get(prompt, 0) + 1
        first = prompt * system_blocks
        turns = int(rng.geometric(1 / mean_turns))
        return next(opened), prompt, list(range(first, first + system_blocks)), turns

    def set_prompt_rate(prompt: int) -> None:
        first = prompt * system_blocks
        build.set_rates(range(first, first + system_blocks), prompt_rate(prompt))

    sessions = [open_session() for _ in range(active_sessions)]
    for _ in range(num_requests):
        s = int(rng.integers(active_sessions))
        session, prompt, history, turns_left = sessions[s]
        turns.append(Turn(len(build.keys), session, prompt, len(history) == system_blocks))
        new = fresh.take(user_blocks + answer_blocks)
        if turns_left > 1:
            sessions[s] = (session, prompt, history + new, turns_left - 1)
        else:
            users[prompt] -= 1
            sessions[s] = open_session()
        own = 1 / active_sessions if turns_left > 1 else 0.0
        rates = [prompt_rate(prompt)] * system_blocks
        build.request(history + new, rates + [own] * (len(history) + len(new) - system_blocks))
        if turns_left == 1:  # a new session opened: its prompt gained a reader
            set_prompt_rate(sessions[s][1])
    view = ChatView(
        tuple(turns), active_sessions, mean_turns, system_blocks, tuple(map(float, weights))
    )
    return build.rated(chat=view)


WORKLOADS = {
    "shared-prefixes": shared_prefixes,
    "prefixes+scans": prefixes_with_scans,
    "shifting-popularity": shifting_popularity,
    "multi-turn-chat": multi_turn_chat,
}

RATED_WORKLOADS = {
    "shared-prefixes": rated_shared_prefixes,
    "prefixes+scans": rated_prefixes_with_scans,
    "shifting-popularity": rated_shifting_popularity,
    "multi-turn-chat": rated_multi_turn_chat,
}
"""The same workloads with the generator's true popularity of every block (`RatedTrace`)."""
