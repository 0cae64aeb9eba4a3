"""Duel against a plain reference of its definition (lists and scans), and what it is for."""

from __future__ import annotations

import math
from itertools import count

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_eviction import OPS, run_both

from paged_kv import InvalidArgument, InvalidBlock
from paged_kv.cache.duel import Duel
from paged_kv.cache.eviction import keyed_policy, make_policy
from paged_kv.study.trace_replay import replay_trace
from paged_kv.study.workloads import multi_turn_chat, shared_prefixes, shifting_popularity


class CountsRef:
    """LFU: the lowest count (capped) goes first; ties: the oldest ordering event."""

    def __init__(self, max_bucket, clock):
        self.max_bucket, self.clock = max_bucket, clock
        self.count, self.since = {}, {}  # member -> count; candidate -> its last ordering event

    def tracks(self, m):
        return m in self.count

    def track(self, m, memory):
        self.count[m] = (memory or 0) + 1

    def touch(self, m):
        self.count[m] += 1
        if m in self.since:
            self.since[m] = next(self.clock)

    def make_evictable(self, m):
        self.since[m] = next(self.clock)

    def revive(self, m):
        del self.since[m]

    def victim(self):
        return min(self.since, key=lambda m: (min(self.count[m], self.max_bucket), self.since[m]))

    def evict_member(self, m):
        del self.since[m]
        return self.count.pop(m)

    def forget(self, m):
        self.since.pop(m, None)
        self.count.pop(m, None)


class RecencyRef:
    """T1 and T2 as lists, least recent first; p moved by comebacks among recent evictions."""

    def __init__(self, window):
        self.window, self.p = window, 0.0
        self.t1, self.t2, self.in_t2, self.evictions = [], [], {}, {False: 0, True: 0}

    def tracks(self, m):
        return m in self.in_t2

    def track(self, m, memory):
        c = len(self.in_t2) + 1
        if memory is not None:
            was_t2, number = memory
            if self.evictions[was_t2] - number <= self.window * c:
                self.p = max(0.0, self.p - 1) if was_t2 else min(float(c), self.p + 1)
        self.in_t2[m] = memory is not None

    def touch(self, m):
        if m in self.t1 or m in self.t2:
            (self.t1 if m in self.t1 else self.t2).remove(m)
            self.t2.append(m)
        self.in_t2[m] = True

    def make_evictable(self, m):
        (self.t2 if self.in_t2[m] else self.t1).append(m)

    def revive(self, m):
        (self.t2 if self.in_t2[m] else self.t1).remove(m)

    def victim(self):
        return self.t1[0] if self.t1 and (len(self.t1) > self.p or not self.t2) else self.t2[0]

    def evict_member(self, m):
        was_t2 = self.in_t2.pop(m)
        (self.t2 if was_t2 else self.t1).remove(m)
        self.evictions[was_t2] += 1
        return was_t2, self.evictions[was_t2]

    def forget(self, m):
        if self.in_t2.pop(m, None) is not None:
            for members in (self.t1, self.t2):
                if m in members:
                    members.remove(m)


class ShadowRef:
    """One expert alone on a cache of keys; its ghost is a list of (key, memory), oldest first."""

    def __init__(self, expert, history):
        self.expert, self.history, self.score, self.ghost, self.size = expert, history, 0.0, [], 0

    def access(self, key, capacity):
        if self.expert.tracks(key):
            self.score += 1
            self.expert.touch(key)
            return
        if self.size >= capacity:
            victim = self.expert.victim()
            self.ghost.append((victim, self.expert.evict_member(victim)))
            self.size -= 1
        memory = [mem for k, mem in self.ghost if k == key]
        self.ghost = [(k, mem) for k, mem in self.ghost if k != key]
        self.expert.track(key, memory[0] if memory else None)
        self.expert.make_evictable(key)
        self.size += 1
        while len(self.ghost) > self.history * capacity:
            self.ghost.pop(0)


class DuelRef:
    """The definition in Duel's docstring, with lists and scans."""

    def __init__(self, history=16.0, window=0.25, horizon=8.0, max_bucket=255):
        clock = count()
        self.history, self.horizon = history, horizon
        self.freq, self.rec = CountsRef(max_bucket, clock), RecencyRef(window)
        self.shadows = [
            ShadowRef(CountsRef(max_bucket, count()), history),
            ShadowRef(RecencyRef(window), history),
        ]
        self.ghost = []  # (key, count, lists, eviction number), oldest first
        self.evictions = self.capacity = 0

    @property
    def since(self):
        return self.freq.since

    def leader(self):
        return "frequency" if self.shadows[0].score >= self.shadows[1].score else "recency"

    def access(self, b):
        self.capacity = max(self.capacity, len(self.freq.count))
        for shadow in self.shadows:
            shadow.score *= 1 - 1 / (self.horizon * self.capacity)
            shadow.access(b, self.capacity)

    def track(self, b):
        found = [g for g in self.ghost if g[0] == b]
        self.ghost = [g for g in self.ghost if g[0] != b]
        _, remembered, lists, when = found[0] if found else (b, None, None, 0)
        self.freq.track(b, remembered)
        if self.evictions - when > self.history / 2 * len(self.freq.count):
            lists = None
        self.rec.track(b, lists)
        while len(self.ghost) > int(self.history * len(self.freq.count)):
            self.ghost.pop(0)
        self.access(b)

    def touch(self, b):
        if b not in self.freq.count:
            self.track(b)
            return
        self.freq.touch(b)
        self.rec.touch(b)
        self.access(b)

    def make_evictable(self, b):
        if b not in self.freq.count:
            self.track(b)
        self.freq.make_evictable(b)
        self.rec.make_evictable(b)

    def revive(self, b):
        self.freq.revive(b)
        self.rec.revive(b)

    def forget(self, b):
        self.freq.forget(b)
        self.rec.forget(b)

    def evict(self):
        victim = (self.freq if self.leader() == "frequency" else self.rec).victim()
        remembered, lists = self.freq.evict_member(victim), self.rec.evict_member(victim)
        self.evictions += 1
        self.ghost.append((victim, remembered, lists, self.evictions))
        return victim


@settings(max_examples=300, deadline=None)
@given(
    OPS,
    st.sampled_from([0.0, 0.5, 2.0, 16.0]),
    st.sampled_from([0.1, 0.25, 0.5, 1.0]),
    st.sampled_from([0.25, 8.0]),
    st.integers(1, 4),
)
def test_duel_matches_its_definition(ops, history, window, horizon, max_bucket):
    policy = Duel(history, window, horizon, max_bucket)
    ref = DuelRef(history, window, horizon, max_bucket)

    def same_state():
        assert {x: policy.count(x) for x in range(8)} == {
            x: ref.freq.count.get(x, 0) for x in range(8)
        }
        assert policy.leader() == ref.leader()
        assert policy._recency.p == ref.rec.p
        for shadow, shadow_ref in zip(policy._shadows, ref.shadows, strict=True):
            assert shadow.score == shadow_ref.score
            assert shadow._size == shadow_ref.size
            assert list(shadow._ghost) == [key for key, _ in shadow_ref.ghost]
        assert policy._shadows[1].expert.p == ref.shadows[1].expert.p

    run_both(policy, ref, ops, check=same_state)


@settings(max_examples=100, deadline=None)
@given(OPS)
def test_evict_returns_a_candidate_and_the_candidates_are_what_len_and_in_say(ops):
    policy, candidates = Duel(history=2.0), set()
    for op, b in ops:
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
            assert victim in candidates
            candidates.discard(victim)
        assert len(policy) == len(candidates)
        assert all((x in policy) == (x in candidates) for x in range(8))
    if not candidates:
        with pytest.raises(InvalidBlock, match="no evictable block"):
            policy.evict()


def test_revive_keeps_the_block_tracked_and_forget_leaves_no_memory():
    policy = Duel()
    for _ in range(3):
        policy.touch(5)
    policy.make_evictable(5)
    policy.revive(5)
    assert 5 not in policy and len(policy) == 0
    policy.touch(5)
    assert policy.count(5) == 4
    policy.forget(5)
    policy.touch(5)
    assert policy.count(5) == 1  # forgotten content left nothing in the ghost


def test_the_ghost_is_keyed_by_content_not_block_id():
    content = {1: "system prompt"}
    policy = keyed_policy(Duel, content.__getitem__)
    for _ in range(3):
        policy.touch(1)
    policy.make_evictable(1)
    assert policy.evict() == 1
    content[1], content[2] = "someone's answer", "system prompt"  # the id is reused
    policy.touch(1)
    policy.touch(2)
    assert (policy.count(1), policy.count(2)) == (1, 4)
    assert policy._recency._in_t2 == {1: False, 2: True}  # the comeback goes to T2


def test_the_ghost_stays_within_history_times_the_blocks_tracked():
    policy = Duel(history=2)
    for b in range(1000):
        policy.touch(b)
        policy.make_evictable(b)
        if len(policy) > 10:
            policy.evict()
    assert len(policy._ghost) <= 2 * 11 + 1 and len(policy._key) == 10
    assert all(len(shadow._ghost) <= 2 * 11 for shadow in policy._shadows)


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"history": -1}, "history must be >= 0"),
        ({"history": math.nan}, "history must be >= 0"),
        ({"window": 0}, "window must be > 0"),
        ({"horizon": -2.0}, "horizon must be > 0"),
        ({"horizon": 0}, "horizon must be > 0"),
        ({"horizon": math.nan}, "horizon must be > 0"),
        ({"max_bucket": 0}, "max_bucket"),
    ],
)
def test_bad_arguments_are_refused(arguments, message):
    with pytest.raises(InvalidArgument, match=message):
        Duel(**arguments)


def test_it_follows_frequency_when_popularity_holds_and_recency_on_chats():
    assert make_policy("duel").name == "duel"
    shared, chat = shared_prefixes(seed=0), multi_turn_chat(seed=0)
    duel = replay_trace(shared, 100, "duel").hits
    assert duel >= 0.99 * replay_trace(shared, 100, "lfu-history").hits
    assert duel > replay_trace(shared, 100, "arc").hits
    duel = replay_trace(chat, 200, "duel").hits
    assert duel >= 0.99 * replay_trace(chat, 200, "lru").hits
    assert duel > 2 * replay_trace(chat, 200, "lfu-history").hits


def test_it_beats_lfu_history_arc_and_s3fifo_when_popularity_shifts():
    trace = shifting_popularity(seed=0)
    duel = replay_trace(trace, 200, "duel").hits
    assert duel > max(replay_trace(trace, 200, p).hits for p in ("lfu-history", "arc", "s3fifo"))


@pytest.mark.parametrize("evicted_after, p", [(1, 1.0), (2, 0.0)])
def test_a_comeback_gives_t1_room_only_from_among_its_last_window_evictions(evicted_after, p):
    policy = Duel(window=0.5)
    for b in range(evicted_after + 2):
        policy.touch(b)
        policy.make_evictable(b)
    for b in range(evicted_after + 1):
        assert policy.evict() == b  # from T1, oldest first
    policy.touch(0)  # 2 blocks tracked: the window is the last 0.5 x 2 evictions from T1
    assert policy._recency.p == p


def lead(policy: Duel, expert: str) -> None:
    """Hand the choice of victims to one expert, as if its shadow had been hitting more."""
    frequency, recency = policy._shadows
    frequency.score, recency.score = (1.0, 0.0) if expert == "frequency" else (0.0, 1.0)
    assert policy.leader() == expert


def fresh(policy: Duel, blocks: range) -> None:
    for b in blocks:
        policy.touch(b)
        policy.make_evictable(b)


@pytest.mark.parametrize("expert", ["frequency", "recency"])
def test_neither_expert_names_a_block_in_use_or_forgotten(expert):
    policy = Duel()
    fresh(policy, range(4))  # 0 is the oldest of both experts' orders
    policy.revive(0)
    policy.forget(1)
    lead(policy, expert)
    assert policy.evict() == 2


def test_evict_with_no_candidates_names_the_policy():
    with pytest.raises(InvalidBlock, match="duel: no evictable block"):
        Duel().evict()


@pytest.mark.parametrize("older, newer, victim", [(256, 255, "older"), (255, 254, "newer")])
def test_counts_above_255_share_the_top_bucket(older, newer, victim):
    # 256 and 255 tie in the top bucket (the older candidate goes); 254 sits below 255.
    policy = Duel()
    for block, times in ((0, older), (1, newer)):
        for _ in range(times):
            policy.touch(block)
        policy.make_evictable(block)
    lead(policy, "frequency")
    assert policy.evict() == (0 if victim == "older" else 1)


@pytest.mark.parametrize("blocks, back_to_t2", [(6, True), (7, False)])
def test_the_recency_expert_remembers_half_as_far_back_as_the_ghost(blocks, back_to_t2):
    # One block tracked at a time (each new one evicts the last): block 0 comes back after
    # blocks - 2 later evictions. The ghost (4 x 2 keys) still holds its count; the recency
    # expert remembers only the last 4 / 2 x 2 = 4 evictions.
    policy = Duel(history=4.0)
    for b in range(blocks):
        fresh(policy, range(b, b + 1))
        if len(policy) > 1:
            assert policy.evict() == b - 1
    policy.touch(0)
    assert policy.count(0) == 2
    assert policy._recency._in_t2[0] is back_to_t2


def test_a_comeback_from_t2_takes_one_from_t1s_target():
    policy = Duel()
    policy._recency.p = 2.0
    policy.touch(0)
    policy.touch(0)  # seen again: T2
    policy.make_evictable(0)
    lead(policy, "recency")
    assert policy.evict() == 0  # T1 is empty: T2 gives the victim
    policy.touch(0)
    assert policy._recency.p == 1.0


def test_t1_gives_the_victim_only_while_it_holds_more_than_its_target():
    policy = Duel()
    policy.touch(0)
    policy.touch(0)
    policy.make_evictable(0)  # T2: [0]
    fresh(policy, range(1, 2))  # T1: [1]
    lead(policy, "recency")
    policy._recency.p = 1.0  # T1 holds exactly its target
    assert policy.evict() == 0
    policy._recency.p = 0.0  # now more than its target
    fresh(policy, range(2, 3))
    assert policy.evict() == 1


def test_t1s_target_never_exceeds_the_blocks_tracked():
    policy = Duel(window=10.0)
    fresh(policy, range(2))
    lead(policy, "recency")
    assert policy.evict() == 0
    policy._recency.p = 2.0  # 1 tracked, and the comeback makes 2: the cap
    policy.touch(0)
    assert policy._recency.p == 2.0
