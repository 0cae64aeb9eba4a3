"""The online limit: A0's rule applied to what a trace's past reveals, not to its generator's state.

The A0 oracle (oracle.py) is told every block's true popularity, and in chat when each session
will end: more than any policy can know. Here the same rule (evict the block least likely to be
read next) ranks blocks by what an observer who knows the generator's rules, but none of its
draws, infers from the past. Its hits estimate the most an online policy can reach: an estimate,
since A0's rule is optimal for known probabilities and not proved so while they are learned.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from paged_kv.study.trace_replay import HitStats, perfect_lfu_hits
from paged_kv.study.workloads import ChatView, RatedTrace
from paged_kv.validation import require_positive_int

Rates = dict[int, float]


def online_limit_hits(rated: RatedTrace, capacity: int) -> HitStats:
    """Hits of the best-informed online observer of `rated`'s workload, in a cache of `capacity`.

    Popularity that holds still (shared prefixes, scans): which prefix has which Zipf rank is
    unknown (a policy sees hashes), and every prefix block could be drawn from the start, so a
    block's posterior rate rises with its count alone: the ranking is perfect LFU's. Shifting
    popularity: the same, told where the phases start (the rules fix them). Multi-turn chat:
    `session_posterior_hits`.
    """
    if rated.chat is not None:
        return session_posterior_hits(rated.keys, rated.chat, capacity)
    stats = perfect_lfu_hits(rated.keys, capacity, restarts=rated.phase_starts)
    return HitStats("online-limit", capacity, stats.hits, stats.misses)


def sessions_still_open(
    last_turn: dict[int, int], openings: Sequence[int], active_sessions: int
) -> dict[int, float]:
    """P(each session is still its slot's latest), from when sessions opened and last had turns.

    `last_turn[j]` and `openings` (sorted) are request numbers. A session ends after each turn
    with a fixed probability (geometric turns), so it is the same draw to decide its end only
    when its slot is next picked: a new session opens there instead of a turn. Each opening
    thus retires one of the slots' latest sessions, unseen which. Every pairing of openings with
    retired sessions that fits the trace (a session retires after its last turn; the slots'
    first openings retire none) counts alike, so session j survives each later opening with
    probability 1 - 1/(sessions it could have retired there). An approximation: it does not
    weigh that a slot's first pick must open a session, which matters in the first requests.
    """
    turns = sorted(last_turn.values())
    survive = [0.0] * (len(openings) + 1)  # log P(survive openings i, i+1, ...)
    for i in range(len(openings) - 1, -1, -1):
        before = bisect.bisect_left(turns, openings[i])  # sessions done before opening i
        candidates = active_sessions + before - i  # the slots' starts count as retirable once
        survive[i] = survive[i + 1] + (math.log1p(-1 / candidates) if candidates > 1 else -math.inf)
    return {
        j: math.exp(survive[bisect.bisect_right(openings, turn)]) for j, turn in last_turn.items()
    }


def session_posterior_hits(keys: Sequence[int], view: ChatView, capacity: int) -> HitStats:
    """A0's rule on chat, with the rates an observer of each whole request can infer.

    It sees which session a request continues (its history says so) and when one opens, and is
    told each system prompt's Zipf weight (an online policy would learn them, so this is
    generous). A session's blocks are read next with probability q/n x P(still open)
    (`sessions_still_open`; q = 1 - 1/mean_turns, n = active_sessions); a system prompt's sum
    those of its sessions, plus its weight times the chance that the next request opens a
    session. Blocks the current request has yet to read are kept; ties go to the least recent.
    O(sessions) per request and O(capacity) per eviction: a study, not a policy.
    """
    require_positive_int("capacity", capacity)
    n, q = view.active_sessions, 1 - 1 / view.mean_turns
    last_turn: dict[int, int] = {}
    openings: list[int] = []
    sessions_of: dict[int, list[int]] = {}  # system prompt -> sessions that opened with it
    owner: dict[int, int] = {}  # history block -> its session
    prompt_of: dict[int, int] = {}  # system prompt block -> its prompt
    cached: dict[int, int] = {}  # block -> time of its last access
    hits, t = 0, 0

    def block_rate(block: int, session_rate: Rates, prompt_rate: Rates) -> float:
        if block in owner:
            return session_rate[owner[block]]
        return prompt_rate[prompt_of[block]]

    ends = [turn.start for turn in view.turns[1:]] + [len(keys)]
    for r, (turn, end) in enumerate(zip(view.turns, ends, strict=True)):
        if turn.opens:
            openings.append(r)
            sessions_of.setdefault(turn.prompt, []).append(turn.session)
        last_turn[turn.session] = r
        request = keys[turn.start : end]
        for i, key in enumerate(request):
            if i < view.system_blocks:
                prompt_of[key] = turn.prompt
            else:
                owner[key] = turn.session
        open_now = sessions_still_open(last_turn, openings, n)
        opens_next = max(0.0, 1 - q / n * sum(open_now.values()))
        session_rate = {j: q / n * p for j, p in open_now.items()}
        prompt_rate = {
            p: sum(session_rate[j] for j in js) + opens_next * view.prompt_weights[p]
            for p, js in sessions_of.items()
        }
        rates = {b: block_rate(b, session_rate, prompt_rate) for b in cached}
        for i, key in enumerate(request):
            t += 1
            if key in cached:
                hits += 1
            elif len(cached) >= capacity:
                pending = set(request[i:])
                victim = min(
                    cached, key=lambda b: (math.inf if b in pending else rates[b], cached[b])
                )
                del cached[victim]
            cached[key] = t
            rates[key] = block_rate(key, session_rate, prompt_rate)
    return HitStats("online-limit", capacity, hits, len(keys) - hits)
