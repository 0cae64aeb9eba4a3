"""Each policy against a brute-force reference of its own definition, and against Belady."""

from __future__ import annotations

import itertools
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paged_kv import InvalidArgument, InvalidBlock
from paged_kv.cache.arc import ARC
from paged_kv.cache.eviction import FIFO, LFU, LRU, POLICIES, AgingLFU, EvictionPolicy, make_policy
from paged_kv.cache.s3fifo import S3FIFO
from paged_kv.cache.tinylfu import WTinyLFU
from paged_kv.course.naive import HeapLFU
from paged_kv.study.trace_replay import belady_hits, replay_trace


class Reference:
    """The policies' definitions, written as plainly as possible (every evict is a scan)."""

    def __init__(self, kind: str, max_bucket: int = 255, window: int | None = None):
        self.kind, self.max_bucket, self.window = kind, max_bucket, window
        self.count: dict[int, int] = {}
        self.since: dict[int, int] = {}  # candidate -> time of its last ordering event
        self.clock = 0
        self.recent: deque = deque()
        self.life: dict[int, int] = {}
        self.lives = 0

    def now(self):
        self.clock += 1
        return self.clock

    def touch(self, b):
        if self.kind in ("lfu", "lfu-aging"):
            if b not in self.life:
                self.lives += 1
                self.life[b] = self.lives
            self.set_count(b, self.count.get(b, 0) + 1)
            if self.kind == "lfu-aging":
                self.recent.append((b, self.life[b]))
                if len(self.recent) > self.window:
                    old, life = self.recent.popleft()
                    if self.life.get(old) == life:
                        self.set_count(old, self.count[old] - 1)
        elif self.kind == "lru" and b in self.since:
            self.since[b] = self.now()

    def set_count(self, b, c):
        self.count[b] = c
        if b in self.since:
            self.since[b] = self.now()

    def make_evictable(self, b):
        self.count.setdefault(b, 0)
        self.since[b] = self.now()

    def revive(self, b):
        del self.since[b]

    def forget(self, b):
        self.since.pop(b, None)
        self.count.pop(b, None)
        self.life.pop(b, None)

    def evict(self):
        if self.kind in ("lfu", "lfu-aging"):
            victim = min(
                self.since, key=lambda b: (min(self.count[b], self.max_bucket), self.since[b])
            )
        else:
            victim = min(self.since, key=self.since.get)
        self.forget(victim)
        return victim


OPS = st.lists(
    st.tuples(
        st.sampled_from(["touch", "evictable", "revive", "forget", "evict"]), st.integers(0, 7)
    ),
    max_size=120,
)


def run_both(policy: EvictionPolicy, ref, ops, check=None):
    """Apply `ops` to the policy and its reference alike, comparing them after every step
    (and calling `check()` then, for what a particular reference also tracks)."""
    for op, b in ops:
        if op == "touch":
            policy.touch(b)
            ref.touch(b)
        elif op == "evictable" and b not in ref.since:
            policy.make_evictable(b)
            ref.make_evictable(b)
        elif op == "revive" and b in ref.since:
            policy.revive(b)
            ref.revive(b)
        elif op == "forget":
            policy.forget(b)
            ref.forget(b)
        elif op == "evict" and ref.since:
            assert policy.evict() == ref.evict()
        assert len(policy) == len(ref.since)
        assert all((x in policy) == (x in ref.since) for x in range(8))
        if check is not None:
            check()


@settings(max_examples=300)
@given(OPS)
def test_lru_matches_its_definition(ops):
    run_both(LRU(), Reference("lru"), ops)


@settings(max_examples=300)
@given(OPS)
def test_fifo_matches_its_definition(ops):
    run_both(FIFO(), Reference("fifo"), ops)


@settings(max_examples=300)
@given(OPS, st.integers(1, 4))
def test_lfu_matches_its_definition(ops, max_bucket):
    run_both(LFU(max_bucket=max_bucket), Reference("lfu", max_bucket=max_bucket), ops)


@settings(max_examples=300)
@given(OPS, st.integers(1, 6))
def test_aging_lfu_matches_its_definition(ops, window):
    run_both(AgingLFU(window=window), Reference("lfu-aging", window=window), ops)


@settings(max_examples=200)
@given(OPS)
def test_seed_style_heap_lfu_picks_the_same_victims_as_lfu(ops):
    run_both(HeapLFU(), Reference("lfu"), ops)


def brute_force_optimum(trace, capacity):
    """Most hits any demand-caching policy can get: try every eviction choice."""

    def best(t, cache):
        if t == len(trace):
            return 0
        key = trace[t]
        if key in cache:
            return 1 + best(t + 1, cache)
        if len(cache) < capacity:
            return best(t + 1, cache | {key})
        return max(best(t + 1, (cache - {v}) | {key}) for v in cache)

    return best(0, frozenset())


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 4), max_size=12), st.integers(1, 3))
def test_belady_equals_the_brute_force_optimum(trace, capacity):
    assert belady_hits(trace, capacity).hits == brute_force_optimum(trace, capacity)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 12), max_size=200), st.integers(1, 8))
def test_no_online_policy_beats_belady(trace, capacity):
    bound = belady_hits(trace, capacity).hits
    for name in POLICIES:
        assert replay_trace(trace, capacity, name).hits <= bound


SYSTEM_PROMPT = [0, 1, 2, 3]


def with_scan_flood(rounds=20, scan=40):
    """Requests reuse a 4-block system prompt; every 5th round a one-off scan floods in."""
    trace, fresh = [], 100
    for r in range(rounds):
        trace += [*SYSTEM_PROMPT, fresh]
        fresh += 1
        if r % 5 == 4:
            trace += list(range(fresh, fresh + scan))
            fresh += scan
    return trace


def test_lfu_keeps_the_system_prompt_through_a_scan_that_flushes_lru():
    trace = with_scan_flood()
    survivors = {}
    for name in ("lru", "lfu"):
        policy = make_policy(name)
        replay_trace(trace, 10, policy)
        survivors[name] = [b for b in SYSTEM_PROMPT if b in policy]
    assert survivors == {"lru": [], "lfu": SYSTEM_PROMPT}
    assert replay_trace(trace, 10, "lfu").hits > replay_trace(trace, 10, "lru").hits


def test_aging_lets_a_formerly_hot_block_go_that_plain_lfu_keeps():
    hot_then_cold = [7] * 50 + list(range(100, 400))  # block 7 hot early, never again
    recurring = hot_then_cold + [1, 2, 3] * 50
    kept = {}
    for policy in (LFU(), AgingLFU(window=64)):
        replay_trace(recurring, 4, policy)
        kept[policy.name] = 7 in policy
    assert kept == {"lfu": True, "lfu-aging": False}


def test_a_policy_gets_its_content_key_when_it_is_made():
    content = {7: "system prompt"}.get
    for name in POLICIES:
        assert make_policy(name, key_of=content).content_key(7) == "system prompt", name
        assert make_policy(name).content_key(7) == 7, name  # no key: the id names the content

    class NoSuperInit(LRU):  # a learner's policy: its __init__ neither takes nor passes a key
        def __init__(self):
            self._order = {}

    policy = make_policy(NoSuperInit, key_of=content)
    assert policy.key_of is content and policy.content_key(7) == "system prompt"
    made = FIFO()
    assert make_policy(made, key_of=content) is made and made.key_of is None  # used as made


def test_policies_by_name_class_or_instance_and_a_user_policy():
    assert isinstance(make_policy("lfu-aging"), AgingLFU)
    assert isinstance(make_policy(LRU), LRU)
    mine = FIFO()
    assert make_policy(mine) is mine

    class MostRecentlyUsed(LRU):  # a user-written policy plugs in by subclassing
        name = "mru"

        def evict(self):
            return self._order.popitem(last=True)[0]

    assert replay_trace([1, 2, 3, 1, 2, 3], 2, MostRecentlyUsed).hits == 2
    with pytest.raises(InvalidArgument):
        make_policy("random")
    with pytest.raises(InvalidArgument):
        AgingLFU(window=0)


@pytest.mark.parametrize("name", [*POLICIES, "heap-lfu"])
def test_evicting_from_an_empty_policy_is_a_typed_error(name):
    policy = HeapLFU() if name == "heap-lfu" else make_policy(name)
    with pytest.raises(InvalidBlock, match="no evictable block"):
        policy.evict()


def test_lfu_structures_stay_the_size_of_what_is_tracked():
    policy = LFU()
    for b in range(1000):
        policy.touch(b)
        policy.make_evictable(b)
        if len(policy) > 10:
            policy.evict()
    assert len(policy._count) == len(policy._bucket_of) == 10
    heap = HeapLFU()
    for b in itertools.islice(itertools.cycle(range(20)), 2000):
        if b not in heap:
            heap.make_evictable(b)
        heap.touch(b)
    assert len(heap.heap) > 100 * len(heap)  # the seed design's garbage piles up


# S3-FIFO, W-TinyLFU and ARC against plain references of their definitions, and what each is for.


def test_the_new_policies_keep_a_system_prompt_through_scans_that_flush_lru():
    trace = with_scan_flood(rounds=40)
    kept = {}
    for name in ("lru", "s3fifo", "w-tinylfu", "arc"):
        policy = make_policy(name)
        hits = replay_trace(trace, 10, policy).hits
        kept[name] = (sum(b in policy for b in SYSTEM_PROMPT), hits)
    assert kept["lru"][0] == 0
    for name in ("s3fifo", "w-tinylfu", "arc"):
        assert kept[name][0] == 4, name
        assert kept[name][1] > kept["lru"][1], name


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
