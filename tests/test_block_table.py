import pytest
from hypothesis import given
from hypothesis import strategies as st

from paged_kv import BlockPool, InvalidArgument, OutOfBlocks
from paged_kv.cache.block_table import blocks_needed, grow_block_table, slot_mapping


@given(st.integers(0, 10_000), st.integers(1, 64))
def test_blocks_needed_is_the_smallest_sufficient_count(tokens, size):
    n = blocks_needed(tokens, size)
    assert (n * size >= tokens and (n - 1) * size < tokens) or n == 0 == tokens


@given(
    table=st.lists(st.integers(0, 99), min_size=1, max_size=8, unique=True),
    size=st.integers(1, 16),
)
def test_slot_mapping_is_block_times_size_plus_offset(table, size):
    slots = slot_mapping(table, size, 0, len(table) * size)
    assert slots == [b * size + o for b in table for o in range(size)]


def test_slot_mapping_rejects_positions_outside_the_table():
    with pytest.raises(InvalidArgument):
        slot_mapping([3], 4, 0, 5)


def test_grow_block_table_is_all_or_nothing():
    pool = BlockPool(2, 4)
    table = []
    grow_block_table(pool, table, 0, 8)
    with pytest.raises(OutOfBlocks):
        grow_block_table(pool, table, 8, 1)
    assert table == [0, 1] and pool.num_free == 0


# Behaviours that mutation testing (tools/mutation_test.py) found no test pinning, in the cache
# layer: each test here kills at least one mutant that survived every other test of its module.


@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=4),
    st.integers(1, 4),
    st.integers(-10, -1),
    st.integers(0, 16),
)
def test_slot_mapping_refuses_a_negative_start(table, block_size, start, end):
    """A negative position would wrap around to the last block and hand out its slots."""
    with pytest.raises(InvalidArgument):
        slot_mapping(table, block_size, start, end)
