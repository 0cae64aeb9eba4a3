"""paged_kv.cache.s3fifo: S3-FIFO's queues, second chances and ghosts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paged_kv.cache.eviction import keyed_policy
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
    victim is main's oldest block, not S's newcomer; at the share, S's oldest."""
    policy = S3FIFO(small_ratio=0.5)
    for b in (0, 1, 2):
        policy.make_evictable(b)
        _hit(policy, b)
    policy.make_evictable(3)
    assert policy.evict() == 3  # 0, 1 and 2 move to M; S's one-hit wonder goes
    policy.make_evictable(4)  # S holds 1 of 4 candidates: under half
    assert policy.evict() == 0
    assert policy.queues() == {"small": [4], "main": [1, 2], "ghost": [3]}
    policy.make_evictable(5)  # S holds 2 of 4: its share exactly, so S gives the victim
    assert policy.evict() == 4


# S3-FIFO, W-TinyLFU and ARC against plain references of their definitions, and what each is for.


KEYS = range(8)


OPS = st.lists(
    st.tuples(
        st.sampled_from(["touch", "evictable", "revive", "forget", "evict", "hit"]),
        st.integers(0, 7),
    ),
    max_size=150,
)


class S3FIFORef:
    def __init__(self, small_ratio=0.1, ghost_ratio=0.9, move_threshold=1, max_freq=3):
        self.small_ratio, self.ghost_ratio = small_ratio, ghost_ratio
        self.threshold, self.max_freq = move_threshold, max_freq
        self.small, self.main, self.ghost = [], [], []
        self.freq, self.in_main = {}, {}

    def candidates(self):
        return self.small + self.main

    def track(self, b):
        self.in_main[b] = b in self.ghost
        if b in self.ghost:
            self.ghost.remove(b)
        self.freq[b] = 0
        while len(self.ghost) > int(self.ghost_ratio * len(self.freq)):
            self.ghost.pop(0)

    def touch(self, b):
        if b in self.freq:
            self.freq[b] = min(self.freq[b] + 1, self.max_freq)
        else:
            self.track(b)

    def make_evictable(self, b):
        if b not in self.freq:
            self.track(b)
        (self.main if self.in_main[b] else self.small).append(b)

    def revive(self, b):
        (self.main if self.in_main[b] else self.small).remove(b)

    def forget(self, b):
        if b in self.freq:
            for queue in (self.small, self.main):
                if b in queue:
                    queue.remove(b)
            del self.freq[b], self.in_main[b]

    def evict(self):
        n = len(self.small) + len(self.main)
        if self.small and (not self.main or len(self.small) >= self.small_ratio * n):
            while self.small:
                b = self.small.pop(0)
                if self.freq[b] >= self.threshold:
                    self.freq[b], self.in_main[b] = 0, True
                    self.main.append(b)
                else:
                    del self.freq[b], self.in_main[b]
                    self.ghost.append(b)
                    return b
        while True:
            b = self.main.pop(0)
            if self.freq[b]:
                self.freq[b] -= 1
                self.main.append(b)
            else:
                del self.freq[b], self.in_main[b]
                return b


def run_both(policy, ref, ops):
    """Apply `ops` to both; a `hit` is what the pool does on a prefix hit and its release."""
    for op, b in ops:
        candidates = ref.candidates()
        if op == "touch":
            policy.touch(b)
            ref.touch(b)
        elif op == "evictable" and b not in candidates:
            policy.make_evictable(b)
            ref.make_evictable(b)
        elif op == "revive" and b in candidates:
            policy.revive(b)
            ref.revive(b)
        elif op == "hit" and b in candidates:
            for target in (policy, ref):
                target.revive(b)
                target.touch(b)
                target.make_evictable(b)
        elif op == "forget":
            policy.forget(b)
            ref.forget(b)
        elif op == "evict" and candidates:
            assert policy.evict() == ref.evict()
        assert len(policy) == len(ref.candidates())
        assert all((x in policy) == (x in ref.candidates()) for x in KEYS)


@settings(max_examples=200, deadline=None)
@given(OPS, st.sampled_from([0.1, 0.3, 0.5]), st.integers(1, 2), st.integers(1, 3))
def test_s3fifo_matches_its_definition(ops, small_ratio, threshold, max_freq):
    kwargs = dict(small_ratio=small_ratio, move_threshold=threshold, max_freq=max_freq)
    run_both(S3FIFO(**kwargs), S3FIFORef(**kwargs), ops)


def test_ghosts_remember_content_not_block_ids():
    """With a content key bound, content evicted from one block and recomputed into another is
    recognised (S3-FIFO sends it to main); an unrelated block reusing the id is not."""
    content = {0: "sys", 1: "a", 2: "b"}
    policy = keyed_policy(S3FIFO, content.__getitem__, small_ratio=0.5)
    for b in (0, 1):
        policy.touch(b)
        policy.make_evictable(b)
    assert policy.evict() == 0  # "sys" leaves S for the ghost queue
    content[0] = "new"  # block 0 now holds other content...
    content[2] = "sys"  # ...and block 2 the old system prompt
    for b in (0, 2):
        policy.touch(b)
        policy.make_evictable(b)
    assert policy.queues()["main"] == [2] and 0 in policy.queues()["small"]
