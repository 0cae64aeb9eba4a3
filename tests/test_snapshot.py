"""paged_kv.cache.snapshot: a pool snapshot counts what the pool holds."""

from hypothesis import given, settings
from hypothesis import strategies as st

from paged_kv import BlockPool
from paged_kv.cache.snapshot import BlockInfo, BlockState, PoolSnapshot

# Behaviours that mutation testing (tools/mutation_test.py) found no test pinning, in the cache
# layer: each test here kills at least one mutant that survived every other test of its module.


POOL_OPS = st.lists(
    st.tuples(st.sampled_from("aaksrre"), st.floats(0, 0.999)), min_size=1, max_size=60
)


@settings(max_examples=60, deadline=None)
@given(POOL_OPS)
def test_a_snapshot_counts_each_state_as_the_pool_does(ops):
    pool, held = BlockPool(8, 4), []
    for op, x in ops:
        if op == "a" and pool.num_available:
            held += pool.allocate(1)
        elif op == "k" and held:
            pool.keep_content([held[int(x * len(held))]])
        elif op in "rs" and held:
            i = int(x * len(held))
            if op == "s":
                pool.share([held[i]])
                held.append(held[i])
            else:
                pool.release([held.pop(i)])
        snap = pool.snapshot()
        assert snap.count(BlockState.FREE) == pool.num_free
        assert snap.count(BlockState.CACHED) == pool.num_cached
        assert snap.count(BlockState.IN_USE) == pool.num_in_use


@given(
    st.integers(1, 4),
    st.dictionaries(
        st.sampled_from("abc"),
        st.tuples(st.lists(st.integers(0, 5), max_size=4, unique=True), st.integers(0, 16)),
        max_size=3,
    ),
)
def test_a_snapshot_counts_the_tokens_each_block_holds(block_size, tables):
    """A block's token count is the most any holder has written to it: 0 to block_size, 0
    for a block a table reserved past its sequence's end."""
    blocks = tuple(BlockInfo(b, BlockState.IN_USE, 1) for b in range(6))
    snap = PoolSnapshot(block_size, None, blocks).with_tables(tables)
    for info in snap.blocks:
        expected = [
            min(block_size, max(0, length - i * block_size))
            for table, length in tables.values()
            for i, b in enumerate(table)
            if b == info.block_id
        ]
        assert info.num_tokens == max(expected, default=0)
        assert 0 <= info.num_tokens <= block_size
