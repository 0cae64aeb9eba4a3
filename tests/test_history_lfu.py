"""LFU with history against a plain reference of its definition, and what its ghost is for."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_eviction import run_both

from paged_kv import InvalidArgument
from paged_kv.cache.eviction import LFU, keyed_policy, make_policy
from paged_kv.cache.history_lfu import HistoryLFU
from paged_kv.study.trace_replay import replay_trace
from paged_kv.study.workloads import shared_prefixes


class HistoryLFURef:
    """Lists and scans: the lowest count goes first (capped at max_bucket; ties: the candidate
    whose count or candidacy changed longest ago); an evicted block's count waits in a FIFO
    ghost of at most int(history x tracked) keys, trimmed when a block comes in."""

    def __init__(self, history: float, max_bucket: int = 255):
        self.history, self.max_bucket = history, max_bucket
        self.count: dict[int, int] = {}
        self.since: dict[int, int] = {}  # candidate -> time of its last ordering event
        self.ghost: list[tuple[int, int]] = []
        self.clock = 0

    def now(self):
        self.clock += 1
        return self.clock

    def track(self, b):
        remembered = [c for k, c in self.ghost if k == b]
        self.ghost = [(k, c) for k, c in self.ghost if k != b]
        self.count[b] = remembered[0] if remembered else 0
        while len(self.ghost) > int(self.history * len(self.count)):
            self.ghost.pop(0)

    def touch(self, b):
        if b not in self.count:
            self.track(b)
        self.count[b] += 1
        if b in self.since:
            self.since[b] = self.now()

    def make_evictable(self, b):
        if b not in self.count:
            self.track(b)
        self.since[b] = self.now()

    def revive(self, b):
        del self.since[b]

    def forget(self, b):
        self.since.pop(b, None)
        self.count.pop(b, None)

    def evict(self):
        victim = min(self.since, key=lambda b: (min(self.count[b], self.max_bucket), self.since[b]))
        self.ghost.append((victim, self.count[victim]))
        self.forget(victim)
        return victim


OPS = st.lists(
    st.tuples(
        st.sampled_from(["touch", "evictable", "revive", "forget", "evict"]), st.integers(0, 7)
    ),
    max_size=150,
)


@settings(max_examples=300)
@given(OPS, st.sampled_from([0.0, 0.5, 1.0, 2.0, 16.0]), st.integers(1, 4))
def test_history_lfu_matches_its_definition(ops, history, max_bucket):
    policy, ref = HistoryLFU(history, max_bucket), HistoryLFURef(history, max_bucket)

    def same_counts():
        assert {x: policy.count(x) for x in range(8)} == {x: ref.count.get(x, 0) for x in range(8)}

    run_both(policy, ref, ops, check=same_counts)


def test_a_comeback_resumes_its_count_where_plain_lfu_starts_over():
    for policy, expected in ((HistoryLFU(), 4), (LFU(), 1)):
        for _ in range(3):
            policy.touch(7)
        policy.make_evictable(7)
        assert policy.evict() == 7
        policy.touch(7)
        assert policy.count(7) == expected


def test_the_ghost_is_keyed_by_content_not_block_id():
    content = {1: "system prompt"}
    policy = keyed_policy(HistoryLFU, content.__getitem__)
    for _ in range(3):
        policy.touch(1)
    policy.make_evictable(1)
    policy.evict()
    content[1], content[2] = "someone's answer", "system prompt"  # the id is reused
    policy.touch(1)
    policy.touch(2)
    assert (policy.count(1), policy.count(2)) == (1, 4)


def test_the_ghost_stays_within_history_times_the_blocks_tracked():
    policy = HistoryLFU(history=2)
    for b in range(1000):
        policy.touch(b)
        policy.make_evictable(b)
        if len(policy) > 10:
            policy.evict()
    assert len(policy._ghost) <= 2 * 11 + 1 and len(policy._key) == 10
    with pytest.raises(InvalidArgument, match="history must be >= 0"):
        HistoryLFU(history=-1)


def test_rare_prefixes_outrank_one_off_blocks_once_their_counts_survive_eviction():
    trace = shared_prefixes(1000, seed=3)
    assert make_policy("lfu-history").name == "lfu-history"
    assert replay_trace(trace, 100, "lfu-history").hits > replay_trace(trace, 100, "lfu").hits
