"""paged_kv.cache.tinylfu: W-TinyLFU's window, frequency sketch and doorkeeper."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_s3fifo import KEYS, OPS, run_both

from paged_kv.cache.tinylfu import FrequencySketch, WTinyLFU, key_hash64

# Behaviours that mutation testing (tools/mutation_test.py) found no test pinning, in the cache
# layer: each test here kills at least one mutant that survived every other test of its module.


def test_w_tinylfu_adapts_its_window_once_per_sample_of_touches():
    """A sample is `sample_factor` x blocks tracked touches (a miss is one touch); at its end
    the window's share moves one step toward a better hit ratio."""
    policy = WTinyLFU(window_ratio=0.25, sample_factor=2)
    policy.touch(0)  # a miss: 1 touch of the sample's 2
    assert policy.window_ratio == 0.25
    policy.touch(0)  # a hit ends the sample: hit ratio 1/2, better than 0
    assert policy.window_ratio == 0.25 + WTinyLFU.step_ratio


def test_w_tinylfu_climbs_toward_a_better_hit_ratio_and_turns_back_after_a_worse_one():
    """The window keeps moving while the hit ratio improves and reverses when it falls, with
    its step restarted (in the direction it now moves) after a jump of 5 points or more."""
    policy = WTinyLFU(window_ratio=0.25, sample_factor=1)  # a sample: 1 touch a block tracked
    shares = []
    for sample in ([0], [0], [1, 2, 1], [1, 2, 0]):  # hit ratios 0, 1, 1/3, 1
        for block in sample:
            policy.touch(block)
        shares.append(policy.window_ratio)
    assert 0.25 < shares[0] < shares[1], "no worse, then better: up, and up again"
    assert shares[2] < shares[1], "worse: it turns back"
    assert shares[3] == pytest.approx(shares[2] - WTinyLFU.step_ratio), (
        "better again: on down, by the restarted step"
    )


def test_w_tinylfu_forgets_a_block_entirely():
    """A forgotten block is new again: it comes back in the window, not where it had got to."""
    policy = WTinyLFU(adaptive=False)
    for block in (0, 1):
        policy.make_evictable(block)
    assert policy.evict() == 1  # 0 moved on to probation; the window's newcomer lost its duel
    assert policy.segments() == {"window": [], "probation": [0], "protected": []}
    policy.forget(0)
    assert policy.segments() == {"window": [], "probation": [], "protected": []}
    policy.make_evictable(0)
    assert policy.segments() == {"window": [0], "probation": [], "protected": []}


def test_the_sketch_has_four_counters_a_block_per_row_and_grows_only_past_its_capacity():
    """`width_factor` (4) counters per block of capacity in each row, rounded up to a power of
    two; asking for the capacity it has keeps every count (a resize starts them over)."""
    assert FrequencySketch(capacity=16).width == 64
    assert FrequencySketch(capacity=17).width == 128
    sketch = FrequencySketch(capacity=16)
    for _ in range(3):
        sketch.increment("k")
    sketch.ensure_capacity(16)
    assert (sketch.capacity, sketch.estimate("k")) == (16, 3)
    sketch.ensure_capacity(17)
    assert (sketch.capacity, sketch.estimate("k")) == (32, 0)


@pytest.mark.parametrize(
    ("capacity", "sample_factor", "seen"), [(64, 16, 512), (128, 8, 512), (205, 5, 1024)]
)
def test_the_doorkeeper_spends_one_bit_per_sample(capacity, sample_factor, seen):
    """TinyLFU's doorkeeper is a Bloom filter (two hashes) of one bit per sample, rounded up
    to a power of two (1,024 samples: 1,024 bits; 1,025: 2,048): after half its bits' worth of
    distinct keys, about a third of keys never seen look seen once (theory: (1 - e^-1)^2 =
    0.40). Twice the bits would show about 0.15, half of them about 0.75: the rate pins the
    memory the filter costs."""
    sketch = FrequencySketch(capacity=capacity, sample_factor=sample_factor)
    assert sketch.sample_size == capacity * sample_factor
    for key in range(seen):
        sketch.increment(key)
    unseen = range(10**6, 10**6 + 4000)
    false_positive_rate = sum(1 for k in unseen if sketch.estimate(k) >= 1) / len(unseen)
    assert 0.25 <= false_positive_rate <= 0.5


# S3-FIFO, W-TinyLFU and ARC against plain references of their definitions, and what each is for.


class ExactFrequency:
    """What `FrequencySketch` estimates, kept exactly: doorkeeper, cap 15, halving."""

    def __init__(self, sample_factor):
        self.sample_factor, self.capacity = sample_factor, 16
        self.door, self.count, self.additions = set(), {}, 0

    def ensure_capacity(self, capacity):
        if capacity > self.capacity:  # the sketch starts over when it grows
            self.capacity = max(capacity, 2 * self.capacity)
            self.door, self.count, self.additions = set(), {}, 0

    def increment(self, key):
        if key not in self.door:
            self.door.add(key)
        else:
            self.count[key] = min(15, self.count.get(key, 0) + 1)
        self.additions += 1
        if self.additions >= self.sample_factor * self.capacity:
            self.count = {k: c // 2 for k, c in self.count.items()}
            self.door, self.additions = set(), self.additions // 2

    def estimate(self, key):
        return self.count.get(key, 0) + (key in self.door)


class WTinyLFURef:
    def __init__(self, window_ratio=0.01, protected_ratio=0.8, sample_factor=10, adaptive=True):
        self.window_ratio, self.protected_ratio = window_ratio, protected_ratio
        self.sample_factor, self.adaptive = sample_factor, adaptive
        self.freq = ExactFrequency(sample_factor)
        self.window, self.probation, self.protected = [], [], []
        self.segment = {}
        self.hits = self.misses = 0
        self.previous, self.step = 0.0, 0.0625

    def candidates(self):
        return self.window + self.probation + self.protected

    def lists(self):
        return (self.window, self.probation, self.protected)

    def climb(self):
        touches = self.hits + self.misses
        if not self.adaptive or touches < self.sample_factor * len(self.segment):
            return
        ratio = self.hits / touches
        change = ratio - self.previous
        step = self.step if change >= 0 else -self.step
        self.previous, self.hits, self.misses = ratio, 0, 0
        self.window_ratio = min(0.8, max(0.01, self.window_ratio + step))
        self.step = step * 0.98
        if abs(change) >= 0.05:
            self.step = 0.0625 if step >= 0 else -0.0625

    def demote(self):
        while len(self.protected) > self.protected_ratio * (
            len(self.probation) + len(self.protected)
        ):
            b = self.protected.pop(0)
            self.segment[b] = 1
            self.probation.append(b)

    def touch(self, b):
        if b not in self.segment:
            self.segment[b] = 0
            self.freq.ensure_capacity(len(self.segment))
            self.freq.increment(b)
            self.misses += 1
            self.climb()
            return
        self.freq.increment(b)
        self.hits += 1
        self.climb()
        seg = self.segment[b]
        members = self.lists()[seg]
        if seg == 1:
            self.segment[b] = 2
            if b in members:
                members.remove(b)
                self.protected.append(b)
                self.demote()
        elif b in members:
            members.remove(b)
            members.append(b)

    def make_evictable(self, b):
        if b not in self.segment:
            self.segment[b] = 0
            self.freq.ensure_capacity(len(self.segment))
        self.lists()[self.segment[b]].append(b)
        if self.segment[b] == 2:
            self.demote()

    def revive(self, b):
        self.lists()[self.segment[b]].remove(b)

    def forget(self, b):
        if b in self.segment:
            members = self.lists()[self.segment.pop(b)]
            if b in members:
                members.remove(b)

    def evict(self):
        n = len(self.candidates())
        target = max(1, int(self.window_ratio * n))
        while len(self.window) > target:
            b = self.window.pop(0)
            self.segment[b] = 1
            self.probation.append(b)
        main = self.probation or self.protected
        if not main:
            b = self.window.pop(0)
            del self.segment[b]
            return b
        victim = main[0]
        if len(self.window) >= target:
            candidate = self.window.pop(0)
            if self.freq.estimate(candidate) <= self.freq.estimate(victim):
                del self.segment[candidate]
                return candidate
            self.segment[candidate] = 1
            self.probation.append(candidate)
        main.remove(victim)
        del self.segment[victim]
        return victim


@settings(max_examples=200, deadline=None)
@given(OPS, st.sampled_from([0.01, 0.2, 0.5]), st.booleans(), st.integers(1, 3))
def test_w_tinylfu_matches_its_definition(ops, window_ratio, adaptive, sample_factor):
    kwargs = dict(window_ratio=window_ratio, sample_factor=sample_factor, adaptive=adaptive)
    policy = WTinyLFU(**kwargs)
    assert sketch_is_exact_for(policy.sketch, KEYS)
    run_both(policy, WTinyLFURef(**kwargs), ops)


def sketch_is_exact_for(sketch, keys):
    """No two of `keys` share all four counters or both doorkeeper bits (so estimates are
    exact counts, as the reference assumes). Checked, not hoped for."""
    counters, doors = set(), set()
    for key in keys:
        h = key_hash64(key)
        h1, h2 = h & 0xFFFFFFFF, (h >> 32) | 1
        slots = tuple((h1 + i * h2) & sketch.mask for i in range(sketch.depth))
        door = frozenset({h1 & sketch._door_mask, (h2 >> 1) & sketch._door_mask})
        counters.add(slots)
        doors.add(door)
    return len(counters) == len(doors) == len(keys)


def test_the_sketch_counts_after_the_doorkeeper_and_halves_at_each_reset():
    sketch = FrequencySketch(capacity=64, sample_factor=10)
    keys = range(20)
    assert sketch_is_exact_for(sketch, keys)
    for _ in range(5):
        sketch.increment(3)
    sketch.increment(4)
    assert (sketch.estimate(3), sketch.estimate(4), sketch.estimate(5)) == (5, 1, 0)
    for _ in range(30):
        sketch.increment(7)
    assert sketch.estimate(7) == 16  # 15 counted (the cap) + the doorkeeper's one
    while sketch.resets == 0:
        sketch.increment(8)
    assert sketch.estimate(3) == 2 and sketch.estimate(7) == 7  # halved, doorkeeper cleared


def test_the_sketch_never_underestimates_with_collisions():
    sketch = FrequencySketch(capacity=16, sample_factor=10_000)  # no reset in this test
    truth: dict[int, int] = {}
    for i in range(3000):
        key = (i * 7919) % 500  # 500 keys in 64 counters per row: plenty of collisions
        sketch.increment(key)
        truth[key] = truth.get(key, 0) + 1
    assert all(sketch.estimate(k) >= min(n, 16) for k, n in truth.items())
