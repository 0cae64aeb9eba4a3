"""The A0 oracle on traces small enough to follow by hand, never above Belady,
and the workloads' rates, which must describe the very traces the policies replay."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paged_kv.study.oracle import oracle_hits
from paged_kv.study.trace_replay import belady_hits, replay_trace
from paged_kv.study.workloads import RATED_WORKLOADS, WORKLOADS, RatedTrace


def test_oracle_keeps_the_likelier_block_where_lru_keeps_the_recent_one():
    # a (rate 0.9), b (0.1), then c (0.5) in a cache of 2: the oracle evicts b, keeps a for
    # its comeback, then evicts c (0.5 < 0.9) for b. LRU evicts a first and misses all five.
    rated = RatedTrace([1, 2, 3, 1, 2], [(1, 1, 0.9), (2, 2, 0.1), (3, 3, 0.5)])
    assert oracle_hits(rated, 2).hits == 1
    assert replay_trace(rated.keys, 2, "lru").hits == 0
    assert belady_hits(rated.keys, 2).hits == 1


def test_a_rate_change_counts_from_its_position_on():
    # a's rate falls to 0 before c arrives: the oracle drops a and misses it at step 3.
    rated = RatedTrace([1, 2, 3, 1], [(1, 1, 0.9), (2, 2, 0.1), (2, 1, 0.0)])
    assert oracle_hits(rated, 2).hits == 0
    # the same change one access later comes after the eviction: a stays and is hit.
    rated = RatedTrace([1, 2, 3, 1], [(1, 1, 0.9), (2, 2, 0.1), (3, 1, 0.0)])
    assert oracle_hits(rated, 2).hits == 1


def test_blocks_the_request_still_reads_are_kept():
    # A request reads 3 then 2; 2 has a low rate but is read next (inf until read).
    rated = RatedTrace([1, 2, 3, 2], [(1, 1, 0.5), (2, 2, 0.1), (2, 2, math.inf), (4, 2, 0.1)])
    assert oracle_hits(rated, 2).hits == 1
    without = RatedTrace(rated.keys, [(1, 1, 0.5), (2, 2, 0.1)])
    assert oracle_hits(without, 2).hits == 0


RATED = st.lists(st.integers(0, 5), min_size=1, max_size=40).flatmap(
    lambda keys: st.tuples(
        st.just(keys),
        st.lists(
            st.tuples(
                st.integers(0, len(keys)), st.integers(0, 5), st.sampled_from([0.0, 0.2, 0.5, 1.0])
            ),
            max_size=30,
        ),
    )
)


@settings(max_examples=300, deadline=None)
@given(RATED, st.integers(1, 4))
def test_oracle_never_beats_belady(keys_changes, capacity):
    keys, changes = keys_changes
    rated = RatedTrace(keys, sorted(changes, key=lambda c: c[0]))
    assert oracle_hits(rated, capacity).hits <= belady_hits(keys, capacity).hits


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_rated_workloads_are_the_replayed_traces_and_the_oracle_stays_under_belady(name):
    for seed in (0, 1):
        rated = RATED_WORKLOADS[name](num_requests=200, seed=seed)
        assert rated.keys == WORKLOADS[name](num_requests=200, seed=seed)
        assert [c[0] for c in rated.changes] == sorted(c[0] for c in rated.changes)
        for capacity in (20, 60):
            assert oracle_hits(rated, capacity).hits <= belady_hits(rated.keys, capacity).hits
