import copy
import functools
import pickle
from collections import Counter

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from paged_kv import (
    BlockPool,
    BlockState,
    InvalidArgument,
    InvalidBlock,
    KVCacheManager,
    OutOfBlocks,
    PagedKVError,
)
from paged_kv.cache.eviction import POLICIES
from paged_kv.cache.ref_count_pool import MAX_BLOCKS
from paged_kv.course import checks


def pool_state(pool: BlockPool):
    return pool.snapshot(), pool.num_free, pool.free_pages()


@pytest.mark.parametrize(
    "make",
    [
        BlockPool,
        functools.partial(BlockPool, allocation="pack_pages", blocks_per_page=1),
    ],
    ids=["fifo", "pack_pages"],
)
def test_library_pool_passes_the_exercise_checks(make):
    checks.check_allocate(make)
    checks.check_release(make)
    checks.check_constant_time_allocate(make)


@pytest.mark.parametrize("allocation", ["fifo", "pack_pages"])
def test_free_pages_check_passes_for_both_strategies(allocation):
    def pool(num_blocks, block_size=16, *, blocks_per_page=None):
        # pack_pages needs pages; the check also builds pools without any
        chosen = allocation if blocks_per_page is not None else "fifo"
        return BlockPool(num_blocks, block_size, blocks_per_page=blocks_per_page, allocation=chosen)

    checks.check_free_pages(pool)


def test_allocate_hands_out_distinct_ids_with_ref_count_one():
    pool = BlockPool(10, 16)
    ids = pool.allocate(4)
    assert len(set(ids)) == 4
    assert all(pool.ref_count(b) == 1 and pool.state(b) is BlockState.IN_USE for b in ids)
    assert pool.num_free == 6 and pool.num_in_use == 4


def test_fifo_reuses_released_blocks_last():
    pool = BlockPool(3, 16)
    a = pool.allocate(1)
    pool.release(a)
    assert pool.allocate(3) == [1, 2, 0]


def test_share_and_release_count_references():
    pool = BlockPool(4, 16)
    [b] = pool.allocate(1)
    pool.share([b])
    assert pool.ref_count(b) == 2
    assert pool.release([b]) == []
    assert pool.state(b) is BlockState.IN_USE
    assert pool.release([b]) == [b]
    assert pool.state(b) is BlockState.FREE


def test_pack_pages_fills_used_pages_before_touching_free_ones():
    pool = BlockPool(16, 16, blocks_per_page=4, allocation="pack_pages")
    ids = pool.allocate(6)  # page 0 full, page 1 half
    pool.release([ids[0]])  # page 0 now has one hole
    pool.release([ids[5]])  # page 1: one block in use
    # The fullest page with room is page 0; then page 1; pages 2 and 3 stay free.
    again = pool.allocate(4)
    assert {b // 4 for b in again} <= {0, 1}
    assert pool.free_pages() == [2, 3]


def test_pack_pages_keeps_more_pages_free_than_fifo_under_churn():
    import random

    free_pages = {}
    for allocation in ("fifo", "pack_pages"):
        rng = random.Random(1)
        pool = BlockPool(256, 16, blocks_per_page=16, allocation=allocation)
        held = []
        for _ in range(3000):
            if held and (rng.random() < 0.5 or pool.num_free == 0):
                held.remove(b := rng.choice(held))
                pool.release([b])
            elif len(held) < 96:
                held += pool.allocate(1)
        free_pages[allocation] = len(pool.free_pages())
    assert free_pages["pack_pages"] > free_pages["fifo"]


def test_releasable_bytes_counts_whole_free_pages():
    pool = BlockPool(8, 16, blocks_per_page=4)
    pool.allocate(1)
    assert pool.free_pages() == [1]
    assert pool.releasable_bytes(1000) == 4 * 1000
    assert pool.page_of(5) == 1


def test_snapshot_reports_states_and_pages():
    pool = BlockPool(4, 2, blocks_per_page=2)
    _, b = pool.allocate(2)
    pool.share([b])
    snap = pool.snapshot()
    assert [x.state for x in snap.blocks] == [BlockState.IN_USE] * 2 + [BlockState.FREE] * 2
    assert [x.ref_count for x in snap.blocks] == [1, 2, 0, 0]
    assert [x.page for x in snap.blocks] == [0, 0, 1, 1]
    assert snap.num_shared == 1 and snap.free_pages() == [1]


# -- bad input: typed errors, state unchanged ---------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_blocks": 0},
        {"num_blocks": -3},
        {"num_blocks": 2.5},
        {"num_blocks": True},
        {"num_blocks": 4, "block_size": 0},
        {"num_blocks": 4, "blocks_per_page": 0},
        {"num_blocks": 10, "blocks_per_page": 4},
        {"num_blocks": 4, "allocation": "best"},
        {"num_blocks": 4, "allocation": "pack_pages"},
    ],
)
def test_bad_construction_raises_invalid_argument(kwargs):
    with pytest.raises(InvalidArgument) as info:
        BlockPool(**kwargs)
    assert isinstance(info.value, ValueError) and isinstance(info.value, PagedKVError)


def prepared_pool():
    pool = BlockPool(8, 16, blocks_per_page=4, allocation="pack_pages")
    ids = pool.allocate(5)
    pool.share(ids[:1])
    pool.release(ids[3:4])
    return pool, ids


@pytest.mark.parametrize(
    ("action", "error"),
    [
        (lambda p, ids: p.allocate(5), OutOfBlocks),
        (lambda p, ids: p.allocate(-1), InvalidArgument),
        (lambda p, ids: p.allocate(1.0), InvalidArgument),
        (lambda p, ids: p.release([ids[3]]), InvalidBlock),  # double free
        (lambda p, ids: p.release([ids[1], ids[1]]), InvalidBlock),  # one ref, two releases
        (lambda p, ids: p.release([ids[2], 8]), InvalidBlock),  # foreign id after a good one
        (lambda p, ids: p.release([-1]), InvalidBlock),
        (lambda p, ids: p.release(["0"]), InvalidBlock),
        (lambda p, ids: p.share([ids[1], 7]), InvalidBlock),  # sharing a free block
        (lambda p, ids: p.ref_count(8), InvalidBlock),
        (lambda p, ids: p.releasable_bytes(0), InvalidArgument),
    ],
)
def test_bad_calls_raise_typed_errors_and_change_nothing(action, error):
    pool, ids = prepared_pool()
    before = pool_state(pool)
    with pytest.raises(error):
        action(pool, ids)
    assert pool_state(pool) == before


def test_out_of_blocks_reports_requested_and_available():
    pool = BlockPool(3, 16)
    with pytest.raises(OutOfBlocks) as info:
        pool.allocate(4)
    assert (info.value.requested, info.value.available) == (4, 3)
    assert "release blocks" in str(info.value)


def test_page_of_without_pages_is_refused():
    with pytest.raises(InvalidArgument):
        BlockPool(4).page_of(0)


# -- cached blocks and eviction -----------------------------------------------------------


def test_kept_blocks_become_cached_and_are_evicted_only_when_nothing_is_free():
    evicted = []
    pool = BlockPool(4, 16, eviction="lru", on_evict=evicted.append)
    a, b, c = pool.allocate(3)
    pool.keep_content([a, b])
    pool.release([a, b, c])
    assert [pool.state(x) for x in (a, b, c)] == [BlockState.CACHED] * 2 + [BlockState.FREE]
    assert (pool.num_free, pool.num_cached, pool.num_in_use, pool.num_available) == (2, 2, 0, 4)
    assert sorted(pool.allocate(2)) == sorted({0, 1, 2, 3} - {a, b}) and evicted == []
    [reused] = pool.allocate(1)  # no free block left: the least recently used cached one goes
    assert reused == a and evicted == [a] and pool.evictions["allocation"] == 1
    assert pool.state(a) is BlockState.IN_USE and pool.state(b) is BlockState.CACHED


def test_sharing_a_cached_block_revives_it_out_of_the_policy():
    pool = BlockPool(2, 16, eviction="lfu")
    [a] = pool.allocate(1)
    pool.keep_content([a])
    pool.release([a])
    pool.share([a])  # a prefix-cache hit
    assert pool.state(a) is BlockState.IN_USE and a not in pool.policy
    assert pool.policy.count(a) == 2  # first use + the hit
    with pytest.raises(OutOfBlocks):
        pool.allocate(2)  # a is in use now: never evicted


def test_lfu_pool_evicts_the_least_hit_cached_block():
    pool = BlockPool(3, 16, eviction="lfu")
    ids = pool.allocate(3)
    pool.keep_content(ids)
    pool.share(ids[:1] * 3)  # block 0 is hit three times
    pool.release(ids + ids[:1] * 3)
    assert pool.allocate(2) == [ids[1], ids[2]]


def test_evict_all_cached_frees_every_cached_block():
    seen = []
    pool = BlockPool(4, 16, blocks_per_page=2, on_evict=seen.append)
    ids = pool.allocate(3)
    pool.keep_content(ids)
    pool.release(ids[:2])
    assert pool.free_pages() == []  # cached blocks still hold their page
    assert pool.evict_all_cached() == 2 and sorted(seen) == sorted(ids[:2])
    assert pool.evictions == {"allocation": 0, "reset": 2}
    assert pool.num_free == 3 and pool.state(ids[2]) is BlockState.IN_USE


def test_keep_content_needs_a_block_in_use():
    pool = BlockPool(2, 16)
    with pytest.raises(InvalidBlock):
        pool.keep_content([0])
    with pytest.raises(InvalidArgument):
        BlockPool(2, eviction="random")


def test_a_pool_beyond_the_cap_is_a_typed_error_not_a_memory_error():
    with pytest.raises(InvalidArgument, match="more than a pool takes"):
        BlockPool(10**10)
    with pytest.raises(InvalidArgument, match="67,108,864"):
        BlockPool(MAX_BLOCKS + 1)


def test_repr_names_free_cached_pages_and_allocation():
    pool = BlockPool(8, 4, blocks_per_page=4, allocation="pack_pages")
    assert repr(pool) == "BlockPool(8/8 free, block_size=4, 2 pages, allocation='pack_pages')"
    a, b, _ = pool.allocate(3)
    pool.keep_content([a])
    pool.release([a, b])
    assert repr(pool) == (
        "BlockPool(6/8 free, 1 cached, block_size=4, 2 pages, allocation='pack_pages')"
    )
    assert repr(BlockPool(3)) == "BlockPool(3/3 free, block_size=16, allocation='fifo')"


@pytest.mark.parametrize("allocation", ["fifo", "pack_pages"])
@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copied_pool_is_independent_and_hands_out_the_same_blocks(allocation, how):
    pool = BlockPool(8, 4, blocks_per_page=4, allocation=allocation, eviction="lfu")
    held = pool.allocate(5)
    pool.keep_content(held[:2])
    pool.release(held[:3])
    twin = copy.deepcopy(pool) if how == "deepcopy" else pickle.loads(pickle.dumps(pool))
    assert twin.snapshot() == pool.snapshot() and repr(twin) == repr(pool)
    assert twin.allocate(5) == pool.allocate(5)  # same free order, same eviction choice
    twin.release(held[3:])
    assert twin.snapshot() != pool.snapshot()  # the original did not see that


def test_discard_frees_cached_blocks_uncounted_and_refuses_others_changing_nothing():
    forgotten = []
    pool = BlockPool(6, 4, on_evict=forgotten.append)
    a, b, c = pool.allocate(3)
    pool.keep_content([a, b, c])
    pool.release([a, b])
    with pytest.raises(InvalidBlock, match="in_use"):
        pool.discard([a, c])  # c is still in use
    with pytest.raises(InvalidBlock, match="free"):
        pool.discard([5])  # free: nothing to discard
    assert pool.num_cached == 2 and not forgotten
    pool.discard([b, a, b])
    assert (pool.num_cached, pool.num_free, forgotten) == (0, 5, [b, a])
    assert pool.evictions == {"allocation": 0, "reset": 0}  # not an eviction
    assert pool.state(a) is BlockState.FREE and pool.state(c) is BlockState.IN_USE


# The cache layer's argument checks at their edges, and its documented defaults.


BAD_COUNTS = [0, -1, True, False, 1.0, "2", None]


@pytest.mark.parametrize("make", [BlockPool, KVCacheManager])
@pytest.mark.parametrize("bad", BAD_COUNTS)
def test_num_blocks_and_block_size_must_be_positive_ints(make, bad):
    with pytest.raises(InvalidArgument, match="num_blocks"):
        make(bad, 4)
    with pytest.raises(InvalidArgument, match="block_size"):
        make(4, bad)


@pytest.mark.parametrize("make", [BlockPool, KVCacheManager])
def test_one_block_of_one_token_is_a_valid_cache(make):
    thing = make(1, 1)
    pool = thing if isinstance(thing, BlockPool) else thing.pool
    assert (pool.num_blocks, pool.block_size) == (1, 1)
    assert pool.num_free == 1


@pytest.mark.parametrize("num_blocks, per_page", [(10, 3), (10, 4), (10, 20), (1, 2)])
def test_pages_must_tile_the_pool(num_blocks, per_page):
    for make in (BlockPool, KVCacheManager):
        with pytest.raises(InvalidArgument, match="multiple of blocks_per_page"):
            make(num_blocks, 4, blocks_per_page=per_page)


@pytest.mark.parametrize("num_blocks, per_page", [(10, 1), (10, 2), (10, 5), (10, 10), (1, 1)])
def test_any_divisor_is_a_valid_page_size(num_blocks, per_page):
    for allocation in ("fifo", "pack_pages"):
        pool = KVCacheManager(num_blocks, 4, blocks_per_page=per_page, allocation=allocation).pool
        assert pool.num_pages == num_blocks // per_page
        assert pool.free_pages() == list(range(num_blocks // per_page))


@pytest.mark.parametrize("bad", BAD_COUNTS[:-1])  # None means: no pages
def test_blocks_per_page_must_be_a_positive_int(bad):
    with pytest.raises(InvalidArgument, match="blocks_per_page"):
        BlockPool(12, 4, blocks_per_page=bad)


# Random operation sequences keep every invariant of DESIGN.md (hypothesis stateful tests).


STEPS = settings(max_examples=250, stateful_step_count=50, deadline=None)


class PoolMachine(RuleBasedStateMachine):
    """The pool against a model: a Counter of references per block."""

    def __init__(self):
        super().__init__()
        self.pool = None
        self.refs = Counter()
        self.kept: set[int] = set()  # blocks whose content is kept (in use or cached)
        self.evicted: list[int] = []

    @precondition(lambda self: self.pool is None)
    @rule(
        pages=st.integers(1, 6),
        per_page=st.integers(1, 5),
        allocation=st.sampled_from(["fifo", "pack_pages"]),
        eviction=st.sampled_from(sorted(POLICIES)),
    )
    def create(self, pages, per_page, allocation, eviction):
        self.pool = BlockPool(
            pages * per_page,
            4,
            blocks_per_page=per_page,
            allocation=allocation,
            eviction=eviction,
            on_evict=self.evicted.append,
        )

    @precondition(lambda self: self.pool is not None)
    @rule(n=st.integers(0, 12))
    def allocate(self, n):
        free_before = self.pool.num_free
        if n > self.pool.num_available:
            snap = self.pool.snapshot()
            try:
                self.pool.allocate(n)
            except OutOfBlocks:
                assert self.pool.snapshot() == snap
                return
            raise AssertionError("allocation beyond capacity succeeded")
        cached_before = self.cached()
        self.evicted.clear()
        ids = self.pool.allocate(n)
        assert len(set(ids)) == n and not any(self.refs[b] for b in ids)
        # Free blocks first; a cached block is evicted only for what the free list lacks.
        assert len(self.evicted) == max(0, n - free_before)
        assert set(self.evicted) <= cached_before and set(self.evicted) <= set(ids)
        self.kept -= set(self.evicted)
        self.refs.update(ids)

    @precondition(lambda self: self.pool is not None and self.refs)
    @rule(data=st.data())
    def keep_content(self, data):
        b = data.draw(st.sampled_from(sorted(self.refs)))
        self.pool.keep_content([b])
        self.kept.add(b)

    @precondition(lambda self: self.pool is not None and self.cached())
    @rule(data=st.data())
    def hit_cached(self, data):
        b = data.draw(st.sampled_from(sorted(self.cached())))
        self.pool.share([b])
        self.refs[b] += 1

    @precondition(lambda self: self.pool is not None)
    @rule()
    def evict_all_cached(self):
        cached = self.cached()
        assert self.pool.evict_all_cached() == len(cached)
        self.kept -= cached

    def cached(self) -> set[int]:
        return {b for b in self.kept if not self.refs[b]}

    @precondition(lambda self: self.pool is not None and self.refs)
    @rule(data=st.data())
    def share(self, data):
        b = data.draw(st.sampled_from(sorted(self.refs)))
        self.pool.share([b])
        self.refs[b] += 1

    @precondition(lambda self: self.pool is not None and self.refs)
    @rule(data=st.data())
    def release(self, data):
        held = sorted(self.refs.elements())
        batch = data.draw(st.lists(st.sampled_from(held), min_size=1, max_size=4))
        want = Counter(batch)
        if any(want[b] > self.refs[b] for b in want):
            snap = self.pool.snapshot()
            try:
                self.pool.release(batch)
            except Exception:
                assert self.pool.snapshot() == snap
                return
            raise AssertionError("over-release succeeded")
        freed = self.pool.release(batch)
        self.refs.subtract(want)
        self.refs = +self.refs
        assert sorted(freed) == sorted(b for b in want if not self.refs[b])

    @invariant()
    def states_match_the_model(self):
        if self.pool is None:
            return
        snap = self.pool.snapshot()
        cached = self.cached()
        for block in snap.blocks:
            b = block.block_id
            assert block.ref_count == self.refs[b]
            assert (block.state is BlockState.IN_USE) == (block.ref_count > 0)
            assert (block.state is BlockState.CACHED) == (b in cached)
            assert (b in self.pool.policy) == (b in cached)  # in-use blocks are never candidates
        assert self.pool.num_cached == len(cached) == snap.count(BlockState.CACHED)
        in_use = snap.count(BlockState.IN_USE)
        assert snap.count(BlockState.FREE) + snap.count(BlockState.CACHED) + in_use == len(
            snap.blocks
        )
        assert self.pool.num_free == snap.count(BlockState.FREE)
        assert self.pool.num_in_use == in_use
        assert self.pool.free_pages() == snap.free_pages()


TestPool = PoolMachine.TestCase


TestPool.settings = STEPS
