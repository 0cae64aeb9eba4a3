"""paged_kv.cache.arc: ARC's lists, ghosts and adaptive target."""

from __future__ import annotations

from hypothesis import given, settings
from test_s3fifo import OPS, _hit, run_both

from paged_kv.cache.arc import ARC
from paged_kv.study.trace_replay import replay_trace

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


# S3-FIFO, W-TinyLFU and ARC against plain references of their definitions, and what each is for.


class ARCRef:
    def __init__(self):
        self.p = 0.0
        self.t1, self.t2, self.b1, self.b2 = [], [], [], []
        self.in_t2 = {}

    def candidates(self):
        return self.t1 + self.t2

    def track(self, b):
        c = len(self.in_t2) + 1
        if b in self.b1:
            self.p = min(float(c), self.p + max(1.0, len(self.b2) / len(self.b1)))
            self.b1.remove(b)
            self.in_t2[b] = True
        elif b in self.b2:
            self.p = max(0.0, self.p - max(1.0, len(self.b1) / len(self.b2)))
            self.b2.remove(b)
            self.in_t2[b] = True
        else:
            self.in_t2[b] = False
        c = len(self.in_t2)
        while self.b1 and len(self.t1) + len(self.b1) > c:
            self.b1.pop(0)
        while (self.b1 or self.b2) and len(self.b1) + len(self.b2) + len(self.candidates()) > 2 * c:
            (self.b2 if self.b2 else self.b1).pop(0)

    def touch(self, b):
        if b not in self.in_t2:
            self.track(b)
        elif self.in_t2[b]:
            if b in self.t2:
                self.t2.remove(b)
                self.t2.append(b)
        else:
            self.in_t2[b] = True
            if b in self.t1:
                self.t1.remove(b)
                self.t2.append(b)

    def make_evictable(self, b):
        if b not in self.in_t2:
            self.track(b)
        (self.t2 if self.in_t2[b] else self.t1).append(b)

    def revive(self, b):
        (self.t2 if self.in_t2[b] else self.t1).remove(b)

    def forget(self, b):
        if b in self.in_t2:
            lst = self.t2 if self.in_t2.pop(b) else self.t1
            if b in lst:
                lst.remove(b)

    def evict(self):
        if self.t1 and (len(self.t1) > self.p or not self.t2):
            b = self.t1.pop(0)
            self.b1.append(b)
        else:
            b = self.t2.pop(0)
            self.b2.append(b)
        del self.in_t2[b]
        return b


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_arc_matches_its_definition(ops):
    policy, ref = ARC(), ARCRef()
    run_both(policy, ref, ops)
    assert policy.p == ref.p


def test_arc_moves_its_target_toward_the_list_that_lost_a_reused_block():
    arc = ARC()
    replay_trace([1, 2, 3, 1, 4, 5], 2, arc)  # 1 is evicted from T1 and comes back: B1 hit
    assert arc.p > 0
