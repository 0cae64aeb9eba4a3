"""A `TokenSequence` handed to `add_sequence` is adopted, not copied: while it is live, the
manager alone appends to it and no second sequence may adopt it; once freed, its owner (a
preempted request) appends again and readmits it, hitting its own cached blocks."""

import pytest

from paged_kv import InvalidArgument, KVCacheManager
from paged_kv.cache import TokenSequence


def state(m: KVCacheManager):
    return m.snapshot(), m.stats(), m.hit_rates(), {s: m.token_ids(s) for s in m.sequence_ids}


def test_a_live_sequence_is_the_managers_alone():
    m = KVCacheManager(8, 4)
    seq = TokenSequence([1, 2, 3, 4, 5])
    m.add_sequence("x", seq)
    before = state(m)
    with pytest.raises(InvalidArgument, match="already live"):
        m.add_sequence("y", seq)
    with pytest.raises(InvalidArgument, match="live"):
        seq.append([6])
    assert state(m) == before and seq.token_ids == [1, 2, 3, 4, 5]
    m.append_tokens("x", [9])  # through the manager: the adopted sequence grows
    assert seq.token_ids == [1, 2, 3, 4, 5, 9] == m.token_ids("x")


def test_a_freed_sequence_goes_back_to_its_owner():
    m = KVCacheManager(8, 4)
    seq = TokenSequence([1, 2, 3, 4, 5])
    m.add_sequence("x", seq)
    m.free_sequence("x")
    seq.append([6])  # the owner's again: a preempted request keeps its tokens
    assert m.add_sequence("x2", seq) == m.block_table("x2")
    assert m.num_cached_tokens("x2") == 4  # its own first block, still cached


def test_a_sequence_carries_its_own_namespace():
    m = KVCacheManager(8, 4)
    before = state(m)
    with pytest.raises(InvalidArgument, match="salt"):
        m.add_sequence("x", TokenSequence([1, 2]), salt="t1")
    with pytest.raises(InvalidArgument, match="salt"):
        m.add_sequence("x", TokenSequence([1, 2]), extra_keys=("k",))
    assert state(m) == before
    m.add_sequence("a", TokenSequence(list(range(5)), salt="t1"))
    m.add_sequence("b", list(range(5)), salt="t1")
    m.add_sequence("c", list(range(5)))
    assert (m.num_cached_tokens("b"), m.num_cached_tokens("c")) == (4, 0)
