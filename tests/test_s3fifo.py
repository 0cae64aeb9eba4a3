"""paged_kv.cache.s3fifo: S3-FIFO's queues, second chances and ghosts."""

import pytest

from paged_kv.cache.s3fifo import S3FIFO

# Behaviours that mutation testing (tools/mutation_test.py) found no test pinning, in the cache
# layer: each test here kills at least one mutant that survived every other test of its module.


def _hit(policy, block_id):
    """What the pool does on a prefix hit and the release after it."""
    policy.revive(block_id)
    policy.touch(block_id)
    policy.make_evictable(block_id)


@pytest.mark.parametrize("max_freq", [1, 2, 3])
def test_s3fifo_main_gives_a_block_hit_there_a_second_chance(max_freq):
    """M is a CLOCK: its oldest block, hit since it entered M, goes back to M's young end
    and a younger block that was never hit is evicted instead."""
    policy = S3FIFO(max_freq=max_freq)
    policy.make_evictable(0)
    _hit(policy, 0)  # hit in S: promoted to M at the next eviction
    policy.make_evictable(1)
    assert policy.evict() == 1  # S's one-hit wonder goes; 0 moves to M
    _hit(policy, 0)  # hit again, now in M
    policy.make_evictable(2)
    _hit(policy, 2)
    policy.make_evictable(3)
    assert policy.evict() == 3  # 2 moves to M after 0, never hit there
    assert policy.queues()["main"] == [0, 2] and not policy.queues()["small"]
    assert policy.evict() == 2, "the block hit in M outlives the one that was not"
    assert policy.evict() == 0


def test_s3fifo_takes_the_victim_from_main_while_small_is_under_its_share():
    """S is probation for a `small_ratio` share of the candidates: below that share, the
    victim is main's oldest block, not S's newcomer."""
    policy = S3FIFO(small_ratio=0.5)
    for b in (0, 1, 2):
        policy.make_evictable(b)
        _hit(policy, b)
    policy.make_evictable(3)
    assert policy.evict() == 3  # 0, 1 and 2 move to M; S's one-hit wonder goes
    policy.make_evictable(4)  # S holds 1 of 4 candidates: under half
    assert policy.evict() == 0
    assert policy.queues() == {"small": [4], "main": [1, 2], "ghost": [3]}
