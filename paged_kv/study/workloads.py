"""Seeded synthetic traces of block accesses, each built to show a policy's strength or flaw.

A trace is a list of block keys (ints) in access order: what a prefix cache sees as requests
arrive and reuse (or not) the KV blocks of earlier ones. Labelled synthetic; every generator
takes a seed and returns the same trace for the same arguments.
"""

from __future__ import annotations

import numpy as np

from paged_kv.errors import InvalidArgument
from paged_kv.validation import require_positive_int


def _zipf_choices(rng: np.random.Generator, n: int, size: int, alpha: float) -> np.ndarray:
    """`size` draws from ranks 0..n-1 with P(rank r) proportional to 1 / (r + 1)^alpha."""
    weights = 1.0 / np.arange(1, n + 1) ** alpha
    return rng.choice(n, size=size, p=weights / weights.sum())


class _Keys:
    """Hands out fresh block keys for blocks that are never shared."""

    def __init__(self, start: int) -> None:
        self.next = start

    def take(self, n: int) -> list[int]:
        keys = list(range(self.next, self.next + n))
        self.next += n
        return keys


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
    require_positive_int("num_requests", num_requests)
    rng = np.random.default_rng(seed)
    fresh = _Keys(num_prefixes * prefix_blocks)
    return _requests(rng, fresh, 0, num_prefixes, num_requests, prefix_blocks, unique_blocks, alpha)


def _requests(
    rng: np.random.Generator,
    fresh: _Keys,
    first_prefix: int,
    num_prefixes: int,
    num_requests: int,
    prefix_blocks: int,
    unique_blocks: int,
    alpha: float,
) -> list[int]:
    """`num_requests` requests: a Zipf-chosen prefix among prefixes first_prefix.. + own blocks."""
    trace: list[int] = []
    for p in _zipf_choices(rng, num_prefixes, num_requests, alpha):
        first = (first_prefix + int(p)) * prefix_blocks
        trace += range(first, first + prefix_blocks)
        trace += fresh.take(unique_blocks)
    return trace


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
    require_positive_int("scan_every", scan_every)
    base = shared_prefixes(
        num_requests,
        num_prefixes=num_prefixes,
        prefix_blocks=prefix_blocks,
        unique_blocks=unique_blocks,
        alpha=alpha,
        seed=seed,
    )
    per_request = prefix_blocks + unique_blocks
    fresh = _Keys(max(base) + 1)
    trace: list[int] = []
    for r in range(num_requests):
        if r and r % scan_every == 0:
            trace += fresh.take(scan_blocks)
        trace += base[r * per_request : (r + 1) * per_request]
    return trace


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
    require_positive_int("phases", phases)
    rng = np.random.default_rng(seed)
    fresh = _Keys(phases * num_prefixes * prefix_blocks)
    trace: list[int] = []
    for phase in range(phases):  # a new family of prefixes each phase
        trace += _requests(
            rng, fresh, phase * num_prefixes, num_prefixes, num_requests // phases,
            prefix_blocks, unique_blocks, alpha,
        )  # fmt: skip
    return trace


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
    require_positive_int("num_requests", num_requests)
    require_positive_int("active_sessions", active_sessions)
    if not mean_turns >= 1:
        raise InvalidArgument(f"mean_turns must be at least 1, got {mean_turns!r}.")
    rng = np.random.default_rng(seed)
    fresh = _Keys(num_system_prompts * system_blocks)
    prompts = iter(_zipf_choices(rng, num_system_prompts, num_requests + active_sessions, alpha))

    def open_session() -> tuple[list[int], int]:
        first = int(next(prompts)) * system_blocks
        turns = int(rng.geometric(1 / mean_turns))
        return list(range(first, first + system_blocks)), turns

    sessions = [open_session() for _ in range(active_sessions)]
    trace: list[int] = []
    for _ in range(num_requests):
        s = int(rng.integers(active_sessions))
        history, turns_left = sessions[s]
        new = fresh.take(user_blocks + answer_blocks)
        trace += history
        trace += new
        history = history + new
        sessions[s] = (history, turns_left - 1) if turns_left > 1 else open_session()
    return trace


WORKLOADS = {
    "shared-prefixes": shared_prefixes,
    "prefixes+scans": prefixes_with_scans,
    "shifting-popularity": shifting_popularity,
    "multi-turn-chat": multi_turn_chat,
}


def chat_sessions(
    num_sessions: int = 120,
    *,
    turns: int = 3,
    num_system_prompts: int = 4,
    system_tokens: int = 256,
    user_tokens: int = 40,
    answer_tokens: int = 80,
    alpha: float = 1.1,
    seed: int = 0,
) -> list[tuple[list[int], list[int]]]:
    """(prompt, answer) token lists of multi-turn chats, in arrival order.

    Each session starts with one of a few system prompts (Zipf-popular) and, at every turn,
    sends the whole conversation so far plus a new user message; sessions interleave. Models
    a chat service: the system prompt is shared by many sessions, the history by the turns of
    one session. User and answer lengths are lognormal around the given means.
    """
    require_positive_int("num_sessions", num_sessions)
    require_positive_int("turns", turns)
    rng = np.random.default_rng(seed)
    vocab = 32_000

    def fresh_tokens(mean: int) -> list[int]:
        length = max(1, int(rng.lognormal(np.log(mean), 0.5)))
        return [int(t) for t in rng.integers(0, vocab, length)]

    systems = [
        [int(t) for t in rng.integers(0, vocab, system_tokens)] for _ in range(num_system_prompts)
    ]
    choice = _zipf_choices(rng, num_system_prompts, num_sessions, alpha)
    history = [list(systems[int(c)]) for c in choice]
    # Session s opens at time s and sends its turns within the next few openings: sessions
    # overlap as in a live service.
    times = sorted(
        (s + float(rng.uniform(0, 5)), s) for s in range(num_sessions) for _ in range(turns)
    )
    requests = []
    for _, s in times:
        prompt = history[s] + fresh_tokens(user_tokens)
        answer = fresh_tokens(answer_tokens)
        requests.append((prompt, answer))
        history[s] = prompt + answer
    return requests
