"""paged_kv.cache.live_sequences: what the manager says of its live sequences."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paged_kv import KVCacheManager, UnknownSequence

# Behaviours that mutation testing (tools/mutation_test.py) found no test pinning, in the cache
# layer: each test here kills at least one mutant that survived every other test of its module.


@given(st.lists(st.tuples(st.sampled_from("af"), st.integers(0, 3)), max_size=20))
def test_the_manager_says_which_sequences_are_live(ops):
    manager, live = KVCacheManager(num_blocks=64, block_size=4), set()
    for op, seq_id in ops:
        if op == "a" and seq_id not in live:
            manager.add_sequence(seq_id, [1, 2, 3, 4, 5])
            live.add(seq_id)
        elif op == "f" and seq_id in live:
            manager.free_sequence(seq_id)
            live.discard(seq_id)
        assert {s for s in range(4) if s in manager} == live
        assert len(manager) == len(live) and sorted(manager.sequence_ids) == sorted(live)


def test_an_unknown_sequence_is_refused_with_the_first_five_live_ids_shown():
    m = KVCacheManager(16, 4)
    for s in range(6):
        m.add_sequence(s, [s])
    with pytest.raises(UnknownSequence, match=r"live sequences: \[0, 1, 2, 3, 4, \.\.\.\] \(6 in"):
        m.block_table("x")
    m.free_sequence(5)
    with pytest.raises(UnknownSequence, match=r"live sequences: \[0, 1, 2, 3, 4\] \(5 in all\)"):
        m.block_table("x")
