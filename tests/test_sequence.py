"""paged_kv.cache.sequence: a token sequence, its hashes and who owns it."""

import pytest

from paged_kv import InvalidArgument, KVCacheManager
from paged_kv.cache import block_hashes
from paged_kv.cache.sequence import TokenSequence

# Behaviours that mutation testing (tools/mutation_test.py) found no test pinning, in the cache
# layer: each test here kills at least one mutant that survived every other test of its module.


@pytest.mark.parametrize("block_size", [0, -4, 2.0, "4"])
def test_a_sequence_refuses_a_block_size_that_is_not_a_positive_int(block_size):
    """Fresh, or already hashed at another size: never a silent empty list or a crash."""
    fresh, hashed = TokenSequence(range(8)), TokenSequence(range(8))
    hashed.full_block_hashes(4)
    for seq in (fresh, hashed):
        with pytest.raises(InvalidArgument):
            seq.full_block_hashes(block_size)


# A `TokenSequence` handed to `add_sequence` is adopted, not copied: while it is live, the
# manager alone appends to it and no second sequence may adopt it; once freed, its owner (a
# preempted request) appends again and readmits it, hitting its own cached blocks.


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


def test_a_new_sequence_has_no_cached_tokens_and_hashes_for_any_block_size():
    seq = TokenSequence(list(range(16)))
    assert seq.num_cached_tokens == 0
    assert seq.full_block_hashes(4) == block_hashes(list(range(16)), 4)
    assert seq.full_block_hashes(8) == block_hashes(list(range(16)), 8)  # not the 4s reused
    assert seq.full_block_hashes(4) == block_hashes(list(range(16)), 4)
    small, big = KVCacheManager(8, 4), KVCacheManager(8, 8)
    small.add_sequence("a", list(range(16)))
    big.add_sequence("a", list(range(16)))
    small.free_sequence("a")
    seq = TokenSequence(list(range(17)))
    small.add_sequence("b", seq)
    big.add_sequence("b", TokenSequence(list(range(17))))
    assert (small.num_cached_tokens("b"), big.num_cached_tokens("b")) == (16, 16)


def test_a_copy_of_a_live_sequence_is_its_own():
    m = KVCacheManager(8, 4)
    seq = TokenSequence([1, 2, 3, 4, 5])
    m.add_sequence("x", seq)
    twin = seq.copy()
    twin.append([6])  # not live: the copy belongs to whoever made it
    assert twin.token_ids == [1, 2, 3, 4, 5, 6] and seq.token_ids == [1, 2, 3, 4, 5]
    m.add_sequence("y", twin)
    assert m.num_cached_tokens("y") == 4
