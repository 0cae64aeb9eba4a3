"""paged_kv.study.trace_replay: replaying traces and requests through a real pool, and the
reference hit counts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paged_kv.cache.eviction import LRU, POLICIES
from paged_kv.errors import InvalidArgument
from paged_kv.study.trace_replay import belady_hits, perfect_lfu_hits, replay_trace, serve_requests
from paged_kv.study.workloads import RATED_WORKLOADS


@pytest.mark.parametrize("policy", ["lru", "lfu", "lfu-aging"])
def test_replaying_through_a_real_pool_gives_the_same_hits(policy):
    from paged_kv.study.trace_replay import replay_trace, trace_frames
    from paged_kv.study.workloads import shared_prefixes

    trace = shared_prefixes(200, seed=3)
    frames = trace_frames(trace, 40, policy)
    assert sum(f.hit for f in frames) == replay_trace(trace, 40, policy).hits
    assert all(sum(k is not None for k in f.keys) <= 40 for f in frames)
    last = frames[-1]
    assert last.keys[last.block] == trace[-1]


def test_replaying_chats_saves_prefill_and_eviction_costs_some():
    from paged_kv.study.token_chats import chat_sessions
    from paged_kv.study.trace_replay import replay_requests

    chats = chat_sessions(30, turns=3, seed=2)
    roomy = replay_requests(chats, num_blocks=5000, block_size=16)
    tight = replay_requests(chats, num_blocks=80, block_size=16, eviction="lfu")
    assert roomy.prompt_tokens == sum(len(p) for p, _ in chats)
    assert 0 < tight.hit_tokens < roomy.hit_tokens and roomy.saved > 0.5


# S3-FIFO, W-TinyLFU and ARC against plain references of their definitions, and what each is for.


def perfect_lfu_by_definition(trace, capacity):
    """Evict the cached block with the fewest accesses ever (ties: least recent), by scanning."""
    count, last, hits = {}, {}, 0
    for t, key in enumerate(trace):
        count[key] = count.get(key, 0) + 1
        if key in last:
            hits += 1
        elif len(last) >= capacity:
            del last[min(last, key=lambda b: (count[b], last[b]))]
        last[key] = t
    return hits


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 12), max_size=200), st.integers(1, 8))
def test_perfect_lfu_matches_its_definition_and_never_beats_belady(trace, capacity):
    hits = perfect_lfu_hits(trace, capacity).hits
    assert hits == perfect_lfu_by_definition(trace, capacity)
    assert hits <= belady_hits(trace, capacity).hits


# Serving a trace request by request: a running request's blocks are never evicted, a finished
# one releases its tail first, and no way of serving beats Belady.


def test_a_finished_request_loses_its_tail_before_its_head():
    # Request A reads 1 2 3; B reads 4. Served, A releases 3 first, so B evicts 3 and A's head
    # survives for A's next turn (1 2 5). Replayed access by access, LRU evicts 1, the oldest.
    trace, starts = [1, 2, 3, 4, 1, 2, 5], [0, 3, 4]
    assert serve_requests(trace, starts, 3, "lru").hits == 2
    assert replay_trace(trace, 3, "lru").hits == 0


def test_a_request_never_evicts_the_blocks_it_holds():
    # A stale session (10 11 12) comes back after a newer block (20), and brings 13: the victim
    # is 20, the only block not held, though LRU ranks 10, hit first, as the oldest.
    trace, starts = [10, 11, 12, 20, 10, 11, 12, 13], [0, 3, 4]
    evicted: list[int] = []

    class Recording(LRU):
        def evict(self) -> int:
            evicted.append(super().evict())
            return evicted[-1]

    assert serve_requests(trace, starts, 4, Recording()).hits == 3
    assert evicted == [20]


def test_a_request_larger_than_the_cache_streams_through_it():
    trace = list(range(10))  # one request of 10 blocks in a cache of 4
    stats = serve_requests(trace, [0], 4, "lru")
    assert stats.hits == 0 and stats.misses == 10


@pytest.mark.parametrize("starts", [[1, 3], [0, 2, 2], [0, 3, 1], []])
def test_request_starts_must_begin_at_zero_and_rise(starts):
    with pytest.raises(InvalidArgument, match="request_starts"):
        serve_requests([1, 2, 3, 4], starts, 2, "lru")


TRACES = st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=6), min_size=1, max_size=15)


def starts_of(requests: list[list[int]]) -> list[int]:
    starts = [0]
    for r in requests[:-1]:
        starts.append(starts[-1] + len(r))
    return starts


@settings(max_examples=200, deadline=None)
@given(TRACES, st.integers(1, 6), st.sampled_from(sorted(POLICIES)))
def test_serving_counts_every_read_and_stays_under_belady(requests, capacity, policy):
    trace = [k for r in requests for k in r]
    stats = serve_requests(trace, starts_of(requests), capacity, policy)
    assert stats.hits + stats.misses == len(trace)
    assert stats.hits <= belady_hits(trace, capacity).hits


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 5), min_size=1, max_size=12),
    st.integers(5, 8),
    st.sampled_from(sorted(POLICIES)),
)
def test_a_request_that_fits_keeps_every_block_it_read(sizes, capacity, policy):
    # Each request reads fresh blocks, then reads them all again: the second pass must hit
    # every one, whatever the policy thinks of them (LFU would evict the fresh count-1 blocks
    # of the running request first, if it could).
    requests, fresh = [], 0
    for n in sizes:
        blocks = list(range(fresh, fresh + n))
        fresh += n
        requests.append(blocks + blocks)
    trace = [k for r in requests for k in r]
    assert serve_requests(trace, starts_of(requests), capacity, policy).hits == sum(sizes)


def test_on_chat_tail_first_release_lifts_lru_to_the_online_limit():
    rated = RATED_WORKLOADS["multi-turn-chat"](1000, seed=0)
    served = serve_requests(rated.keys, rated.request_starts, 100, "lru").hits
    assert served > replay_trace(rated.keys, 100, "lru").hits
