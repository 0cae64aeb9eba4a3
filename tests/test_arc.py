"""paged_kv.cache.arc: ARC's lists, ghosts and adaptive target."""

from test_s3fifo import _hit

from paged_kv.cache.arc import ARC

# Behaviours that mutation testing (tools/mutation_test.py) found no test pinning, in the cache
# layer: each test here kills at least one mutant that survived every other test of its module.


def test_arc_keeps_ghosts_up_to_twice_the_blocks_it_tracks():
    """Lists and ghosts together may hold 2c entries (c blocks tracked): at exactly 2c nothing
    is trimmed, so content evicted from T2 and computed again is still recognised."""
    policy = ARC()
    policy.make_evictable(5)
    assert policy.evict() == 5  # B1 = [5]
    policy.make_evictable(3)
    _hit(policy, 3)  # seen twice: T2
    assert policy.evict() == 3  # B2 = [3]
    policy.make_evictable(0)  # c = 1 tracked, B1 + B2 hold 2 = 2c: at the limit, none trimmed
    assert policy.lists() == {"t1": [0], "t2": [], "b1": [5], "b2": [3]}
    policy.make_evictable(3)  # content 3 again: a B2 ghost hit puts it straight into T2
    assert policy.lists()["t2"] == [3]


def test_arc_drops_the_oldest_t2_ghost_past_twice_the_blocks_it_tracks():
    """When a block comes in and lists plus ghosts would exceed 2c, the oldest ghost of B2
    goes: content evicted from T2 that long ago comes back as new (T1), not as a ghost hit."""
    policy = ARC()
    for b in (0, 1, 2):
        policy.make_evictable(b)
    assert policy.evict() == 0  # B1 = [0]
    _hit(policy, 1)
    _hit(policy, 2)  # T2 = [1, 2]
    assert [policy.evict(), policy.evict()] == [1, 2]  # B2 = [1, 2]
    policy.make_evictable(3)  # c = 1: B1 + B2 hold 3 > 2c, so B2's oldest goes
    assert policy.lists() == {"t1": [3], "t2": [], "b1": [0], "b2": [2]}
    policy.make_evictable(1)
    assert policy.lists()["t1"] == [3, 1] and policy.lists()["t2"] == []
