"""The manager's unchecked pool calls and hash chain: the same results as the checked calls.

`KVCacheManager` shares, releases and keeps blocks of its own tables through `*_unchecked`
calls that skip re-validating ids the pool handed out; a block that fills is hashed by the
sequence's `BlockHashChain`; a new sequence indexes only the blocks after its prefix hits;
a decode step's shortcut (the entry's room) never skips a copy-on-write after a fork.
"""

import pytest

from paged_kv import BlockPool, BlockState, InvalidBlock, KVCacheManager
from paged_kv.cache import block_hashes
from paged_kv.cache.caching_pool import CachingPool
from paged_kv.cache.hashing import BlockHashChain
from paged_kv.cache.ref_count_pool import RefCountPool


def _two_pools_in_the_same_state():
    pools = []
    for _ in range(2):
        evicted = []
        pool = BlockPool(8, 4, on_evict=evicted.append)
        kept, plain, shared = pool.allocate(3)
        pool.keep_content([kept])
        pool.share([shared])
        cached = pool.allocate(1)[0]
        pool.keep_content([cached])
        pool.release([cached])
        pools.append((pool, [kept, plain, shared], cached, evicted))
    return pools


def _state(pool: BlockPool):
    return pool.snapshot(), pool.num_free, pool.num_cached


def _eviction_order(pool: BlockPool, evicted: list[int]) -> list[int]:
    pool.evict_all_cached()  # in the policy's order
    return evicted


def test_release_unchecked_does_what_release_does():
    (checked, table, _, out), (unchecked, same, _, out_too) = _two_pools_in_the_same_state()
    freed = checked.release(table[::-1])
    assert unchecked.release_unchecked(same[::-1]) == freed == table[1::-1]
    assert _state(unchecked) == _state(checked)
    kept, plain, shared = table
    assert unchecked.state(kept) is BlockState.CACHED  # kept content: evictable
    assert unchecked.state(plain) is BlockState.FREE
    assert unchecked.ref_count(shared) == 1  # one holder left
    assert _eviction_order(unchecked, out_too) == _eviction_order(checked, out)


def test_share_unchecked_does_what_share_does_and_revives_a_cached_block():
    (checked, table, cached, _), (unchecked, same, _, _) = _two_pools_in_the_same_state()
    checked.share([cached, *table])
    unchecked.share_unchecked([cached, *same])
    assert _state(unchecked) == _state(checked)
    assert unchecked.state(cached) is BlockState.IN_USE and cached not in unchecked.policy
    assert unchecked.num_cached == 0


def test_keep_content_unchecked_makes_a_released_block_cached():
    pool = BlockPool(4, 4)
    block, other = pool.allocate(2)
    pool.keep_content_unchecked([block])
    pool.release([block, other])
    assert pool.state(block) is BlockState.CACHED and pool.state(other) is BlockState.FREE


def test_the_unchecked_calls_still_go_through_the_checks_of_the_pool_below():
    """The caching layer skips its own checks; a block it does not keep is counted below,
    whose calls are checked: a double free or a share of a free block changes nothing."""
    pool = CachingPool(RefCountPool(4, 4))
    [block] = pool.allocate(1)
    pool.release_unchecked([block])
    for call in (pool.release_unchecked, pool.share_unchecked):
        with pytest.raises(InvalidBlock):
            call([block])
    assert pool.num_free == 4


def test_a_freed_table_becomes_evictable_last_block_first():
    m = KVCacheManager(4, 4)
    table = m.add_sequence("a", list(range(16)))
    m.free_sequence("a")
    assert m.pool.num_cached == 4
    assert [m.pool.allocate(1)[0] for _ in range(4)] == table[::-1]  # LRU evicts the tail first


@pytest.mark.parametrize("salt, extra_keys", [(None, ()), ("tenant", ("lora", 3))])
def test_a_hash_chain_continues_where_it_stopped(salt, extra_keys):
    tokens = list(range(40))
    want = block_hashes(tokens, 8, salt=salt, extra_keys=extra_keys)
    chain = BlockHashChain(8, salt=salt, extra_keys=extra_keys)
    first = chain.hashes(tokens[:20])  # two full blocks; the partial third has no hash
    assert first == want[:2]
    assert chain.hashes(tokens[16:], parent=first[-1]) == want[2:]
    assert chain.hashes(tokens[:7]) == []


def test_a_new_sequence_indexes_only_the_blocks_after_its_hits():
    m = KVCacheManager(16, 4)
    m.add_sequence("a", list(range(13)))  # blocks 0-2 full and indexed
    starts = []
    register = m.prefix_cache.register_hashes

    def spy(table, start, hashes):
        starts.append(start)
        return register(table, start, hashes)

    m.prefix_cache.register_hashes = spy
    m.add_sequence("b", list(range(17)))
    assert m.num_cached_tokens("b") == 12 and starts == [3]
    assert len(m.prefix_cache) == 4  # the hits once, the new full block


@pytest.mark.parametrize("writer", ["parent", "child"])
def test_after_a_fork_a_one_token_append_copies_the_shared_last_block(writer):
    m = KVCacheManager(8, 4)
    m.add_sequence("parent", [1, 2])  # one partly filled block: room for two more tokens
    m.fork("parent", "child")
    [shared] = m.block_table(writer)
    m.append_tokens(writer, [3])
    [copy] = m.block_table(writer)
    assert copy != shared and m.pop_block_copies() == [(shared, copy)]
    other = "child" if writer == "parent" else "parent"
    assert m.block_table(other) == [shared] and m.pool.ref_count(shared) == 1
