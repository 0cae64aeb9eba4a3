"""S3-FIFO, W-TinyLFU and ARC against plain references of their definitions, and what each is for.

The references keep every queue as a Python list (every removal is a scan) and W-TinyLFU's
frequencies as exact counts with the same doorkeeper, cap and halving; the real policies must
choose the same victims on random operation sequences, including the KV-cache operations a
textbook cache does not have (a block leaves the candidates while in use and comes back).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from paged_kv.cache.arc import ARC
from paged_kv.cache.eviction import POLICIES, keyed_policy, make_policy
from paged_kv.cache.s3fifo import S3FIFO
from paged_kv.cache.tinylfu import FrequencySketch, WTinyLFU, key_hash64
from paged_kv.study.trace_replay import belady_hits, perfect_lfu_hits, replay_trace

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


@settings(max_examples=200, deadline=None)
@given(OPS, st.sampled_from([0.01, 0.2, 0.5]), st.booleans(), st.integers(1, 3))
def test_w_tinylfu_matches_its_definition(ops, window_ratio, adaptive, sample_factor):
    kwargs = dict(window_ratio=window_ratio, sample_factor=sample_factor, adaptive=adaptive)
    policy = WTinyLFU(**kwargs)
    assert sketch_is_exact_for(policy.sketch, KEYS)
    run_both(policy, WTinyLFURef(**kwargs), ops)


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_arc_matches_its_definition(ops):
    policy, ref = ARC(), ARCRef()
    run_both(policy, ref, ops)
    assert policy.p == ref.p


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


SYSTEM_PROMPT = [0, 1, 2, 3]


def with_scan_flood(rounds=40, scan=40):
    """Requests reuse a 4-block system prompt; every 5th round a one-off scan floods in."""
    trace, fresh = [], 100
    for r in range(rounds):
        trace += [*SYSTEM_PROMPT, fresh]
        fresh += 1
        if r % 5 == 4:
            trace += list(range(fresh, fresh + scan))
            fresh += scan
    return trace


def test_the_new_policies_keep_a_system_prompt_through_scans_that_flush_lru():
    trace = with_scan_flood()
    kept = {}
    for name in ("lru", "s3fifo", "w-tinylfu", "arc"):
        policy = make_policy(name)
        hits = replay_trace(trace, 10, policy).hits
        kept[name] = (sum(b in policy for b in SYSTEM_PROMPT), hits)
    assert kept["lru"][0] == 0
    for name in ("s3fifo", "w-tinylfu", "arc"):
        assert kept[name][0] == 4, name
        assert kept[name][1] > kept["lru"][1], name


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


def test_arc_moves_its_target_toward_the_list_that_lost_a_reused_block():
    arc = ARC()
    replay_trace([1, 2, 3, 1, 4, 5], 2, arc)  # 1 is evicted from T1 and comes back: B1 hit
    assert arc.p > 0


def test_ghosts_and_sketch_stay_proportional_to_the_cache():
    for policy in (S3FIFO(), ARC(), WTinyLFU()):
        replay_trace(range(20_000), 100, policy)  # a pure scan: every access a new block
        ghosts = sum(len(v) for k, v in _ghost_lists(policy).items())
        assert len(policy) == 100 and ghosts <= 200, (policy.name, ghosts)
    assert WTinyLFU().sketch.capacity == 16
    wt = WTinyLFU()
    replay_trace(range(20_000), 100, wt)
    assert wt.sketch.capacity <= 256 and wt.sketch.resets > 0


def _ghost_lists(policy):
    if isinstance(policy, S3FIFO):
        return {"ghost": policy.queues()["ghost"]}
    if isinstance(policy, ARC):
        lists = policy.lists()
        return {"b1": lists["b1"], "b2": lists["b2"]}
    return {}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 12), max_size=200), st.integers(1, 8))
def test_the_new_policies_never_beat_belady(trace, capacity):
    bound = belady_hits(trace, capacity).hits
    for name in ("s3fifo", "w-tinylfu", "arc"):
        assert replay_trace(trace, capacity, name).hits <= bound


def test_the_new_policies_are_registered_by_name():
    for name, cls in (("s3fifo", S3FIFO), ("w-tinylfu", WTinyLFU), ("arc", ARC)):
        assert name in POLICIES and isinstance(make_policy(name), cls)
        assert make_policy(name).name == name


def perfect_lfu_by_definition(trace, capacity):
    """Evict the cached block with the fewest accesses ever (ties: least recent), by scanning."""
    count, last, hits = {}, {}, 0
    for t, key in enumerate(trace):
        count[key] = count.get(key, 0) + 1
        if key in last:
            hits += 1
        elif len(last) >= capacity:
            del last[min(last, key=lambda b: (count[b], last[b]))]
        last[key] = t
    return hits


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 12), max_size=200), st.integers(1, 8))
def test_perfect_lfu_matches_its_definition_and_never_beats_belady(trace, capacity):
    hits = perfect_lfu_hits(trace, capacity).hits
    assert hits == perfect_lfu_by_definition(trace, capacity)
    assert hits <= belady_hits(trace, capacity).hits
