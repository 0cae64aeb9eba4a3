"""paged_kv.cache.prefix_cache: the hash-chain prefix index."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_radix_cache import BLOCK, PROMPTS, _register

from paged_kv.cache.prefix_cache import PrefixCache
from paged_kv.cache.radix_cache import RadixCache
from paged_kv.cache.sequence import TokenSequence

# Behaviours that mutation testing (tools/mutation_test.py) found no test pinning, in the cache
# layer: each test here kills at least one mutant that survived every other test of its module.


@settings(max_examples=80, deadline=None)
@given(PROMPTS)
@pytest.mark.parametrize("make", [PrefixCache, RadixCache], ids=["hash", "radix"])
def test_content_keys_name_the_content_of_indexed_blocks(make, prompts):
    """Eviction policies remember a block by its content key: equal for the same prefix
    content, different otherwise, and none for a block the index does not hold."""
    index = make(BLOCK)
    content = {}  # indexed block -> its tokens from the start of the prompt to its end
    for seq, table in _register(index, prompts):
        for i, block in enumerate(table):
            content.setdefault(block, tuple(seq.token_ids[: (i + 1) * BLOCK]))
    indexed = [b for b in content if index.content_key(b) is not None]
    assert len(indexed) == len(index)
    for a in indexed:
        for b in indexed:
            same = index.content_key(a) == index.content_key(b)
            assert same == (content[a] == content[b]), (a, b)
    assert index.content_key(10_000) is None


def test_a_hash_level_cache_refuses_sequence_calls_and_a_taken_hash():
    """`PrefixCache()` without a block size serves hash-level calls only; `register` answers
    False, not just something falsy, for a hash another block holds."""
    cache = PrefixCache()
    for call in (
        lambda: cache.match(TokenSequence([1, 2]), 1),
        lambda: cache.register_blocks(TokenSequence([1, 2]), [0], 0, 1),
    ):
        with pytest.raises(TypeError, match=r"PrefixCache\(block_size\) is needed"):
            call()
    assert cache.register(0, b"h") is True and cache.register(1, b"h") is False
    assert cache.longest_prefix([b"h"]) == [0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(1, 15)), max_size=60))
def test_the_hash_chain_holds_exactly_the_blocks_cached_whatever_the_salts(requests):
    """Many tenants through a small pool: the hash chain keeps an entry per cached block, both
    ways, and nothing per salt, so evicted tenants leave nothing behind."""
    from paged_kv import BlockState
    from paged_kv.cache.manager import KVCacheManager

    manager = KVCacheManager(8, 2, prefix_index="hash")
    index = manager.prefix_cache
    assert isinstance(index, PrefixCache)
    for i, (tenant, length) in enumerate(requests):
        manager.add_sequence(i, list(range(length)), salt=f"tenant {tenant}")
        manager.free_sequence(i)
        cached = {b for b in range(8) if manager.pool.state(b) is BlockState.CACHED}
        assert set(index._hash_of) == cached and len(index._block_of) == len(cached)
    manager.reset_prefix_cache()
    assert index._block_of == {} and index._hash_of == {}
