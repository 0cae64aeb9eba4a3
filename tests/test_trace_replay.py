"""paged_kv.study.trace_replay: replaying traces and requests through a real pool, and the
reference hit counts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paged_kv.study.trace_replay import belady_hits, perfect_lfu_hits


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
