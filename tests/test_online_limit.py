"""The online limit: the observer's view describes the very traces replayed, its session
posterior counts what it claims (checked by brute force and against the generator's truth),
and its hits sit where an informed online policy's should: above LRU's, under A0's."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paged_kv.study.online_limit import (
    online_limit_hits,
    session_posterior_hits,
    sessions_still_open,
)
from paged_kv.study.oracle import oracle_hits
from paged_kv.study.trace_replay import belady_hits, perfect_lfu_hits, replay_trace
from paged_kv.study.workloads import RATED_WORKLOADS, ChatView, Turn


def test_told_where_a_phase_starts_lfu_drops_the_old_favourite_first():
    # 1 is read three times; popularity moves on (a restart at 3): 2 is read twice, 3 arrives.
    trace = [1, 1, 1, 2, 2, 3, 2]
    # Counts alone keep 1 (count 3) and evict 2, then miss it.
    assert perfect_lfu_hits(trace, 2).hits == 3
    # Told of the restart, LFU drops 1 (not read since) and keeps 2 for its comeback.
    assert perfect_lfu_hits(trace, 2, restarts=[3]).hits == 4


def test_shifting_popularity_announces_where_each_new_family_starts():
    rated = RATED_WORKLOADS["shifting-popularity"](300, phases=3, num_prefixes=10, prefix_blocks=2)
    assert rated.phase_starts == (400, 800)  # 100 requests of 2 + 2 blocks per phase
    for phase, start in enumerate(rated.phase_starts, start=1):
        family = range(20 * phase, 20 * (phase + 1))
        assert rated.keys[start] in family and rated.keys[start - 4] not in family
    assert online_limit_hits(rated, 30).hits == perfect_lfu_hits(rated.keys, 30, [400, 800]).hits


def test_the_chat_view_describes_every_request_of_the_trace():
    rated = RATED_WORKLOADS["multi-turn-chat"](300, system_blocks=2, active_sessions=4, seed=3)
    view = rated.chat
    assert view is not None and len(view.turns) == 300 and view.system_blocks == 2
    history: dict[int, list[int]] = {}
    ends = [turn.start for turn in view.turns[1:]] + [len(rated.keys)]
    for turn, end in zip(view.turns, ends, strict=True):
        request = rated.keys[turn.start : end]
        assert request[:2] == [2 * turn.prompt, 2 * turn.prompt + 1]
        assert turn.opens == (turn.session not in history)
        if not turn.opens:  # a later turn rereads the session's whole conversation so far
            assert request[:-2] == history[turn.session]
        assert len(request) == len(history.get(turn.session, request[:2])) + 2
        history[turn.session] = request


def brute_force_still_open(last_turn, opened, active_sessions):
    """Every pairing of openings with retired sessions, enumerated; the share leaving j alone."""
    order = sorted(opened, key=opened.get)
    survivors = {j: 0 for j in last_turn}
    total = 0
    starts = [("slot", s) for s in range(active_sessions)]
    choices = [
        [*starts, *(("session", k) for k in last_turn if last_turn[k] < opened[j])] for j in order
    ]
    for pairing in itertools.product(*choices):
        if len(set(pairing)) < len(pairing):
            continue  # a session (or a slot's start) is retired once
        total += 1
        for j in last_turn:
            survivors[j] += ("session", j) not in pairing
    return {j: alive / total for j, alive in survivors.items()}


def slot_process(picks, active_sessions):
    """Run chat slots: each pick continues the slot's session or (False) opens a new one."""
    latest: dict[int, int] = {}
    last_turn, opened = {}, {}
    for r, (slot, goes_on) in enumerate(picks):
        slot %= active_sessions
        if slot in latest and goes_on:
            last_turn[latest[slot]] = r
            continue
        latest[slot] = j = len(opened)
        opened[j] = last_turn[j] = r
    return last_turn, opened, latest


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 3),
    st.lists(st.tuples(st.integers(0, 2), st.booleans()), min_size=1, max_size=7),
)
def test_sessions_still_open_counts_the_pairings_that_fit(active_sessions, picks):
    last_turn, opened, _ = slot_process(picks, active_sessions)
    fast = sessions_still_open(last_turn, sorted(opened.values()), active_sessions)
    slow = brute_force_still_open(last_turn, opened, active_sessions)
    assert fast == pytest.approx(slow, abs=1e-12)


def test_sessions_still_open_is_calibrated_against_the_slots_it_cannot_see():
    # Long runs of 8 slots whose sessions end after a turn with probability 1/4: of the sessions
    # given P(open) near p, a share near p really is its slot's latest.
    rng = random.Random(0)
    buckets = [[0.0, 0, 0] for _ in range(5)]  # summed prediction, count, really latest
    for _ in range(40):
        picks = [(rng.randrange(8), rng.random() < 0.75) for _ in range(300)]
        for r in range(60, 300, 40):
            last_turn, opened, latest = slot_process(picks[: r + 1], 8)
            still = sessions_still_open(last_turn, sorted(opened.values()), 8)
            truth = set(latest.values())
            for j, p in still.items():
                b = buckets[min(int(p * 5), 4)]
                b[0], b[1], b[2] = b[0] + p, b[1] + 1, b[2] + (j in truth)
    for predicted, count, latest in buckets:
        if count >= 200:
            assert latest / count == pytest.approx(predicted / count, abs=0.05)


def test_a_session_known_to_be_over_goes_before_a_system_prompt_that_may_return():
    # One slot: when B opens, A is certainly over. The posterior drops A's history and keeps
    # system prompt 0, which C then reuses; LRU dropped prompt 0, the oldest, and misses it.
    turns = (
        Turn(0, 0, 0, True), Turn(2, 0, 0, False), Turn(5, 1, 1, True), Turn(7, 1, 1, False),
        Turn(10, 2, 0, True),
    )  # fmt: skip
    keys = [0, 10, 0, 10, 11, 1, 20, 1, 20, 21, 0, 30]
    view = ChatView(turns, active_sessions=1, mean_turns=4.0, system_blocks=1,
                    prompt_weights=(0.5, 0.5))  # fmt: skip
    assert session_posterior_hits(keys, view, 4).hits == 5
    assert replay_trace(keys, 4, "lru").hits == 4


@pytest.mark.parametrize("seed", [0, 1])
def test_on_chat_the_online_limit_sits_between_lru_and_the_oracle(seed):
    rated = RATED_WORKLOADS["multi-turn-chat"](1000, seed=seed)
    for capacity in (60, 100):
        limit = online_limit_hits(rated, capacity).hits
        assert replay_trace(rated.keys, capacity, "lru").hits < limit
        assert limit < oracle_hits(rated, capacity).hits <= belady_hits(rated.keys, capacity).hits
