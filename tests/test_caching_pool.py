"""The caching layer wraps any reference-counted pool the same way: over a learner-style pool
(chapter 01's design: a stack of free ids) it answers every call as `BlockPool` (the same layer
over the library's `RefCountPool`) does, on the same logical blocks."""

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paged_kv import LRU, BlockPool, InvalidArgument, InvalidBlock, OutOfBlocks
from paged_kv.cache.caching_pool import CachingPool
from paged_kv.cache.ref_count_pool import RefCountPool
from paged_kv.cache.snapshot import BlockState


class StackPool:
    """A learner-style pool (chapter 01's solution's design): reference counts and a stack of
    free ids, every call checked all or nothing. Its ids come out in another order than the
    library's FIFO free list, so the tests pair blocks up logically."""

    def __init__(self, num_blocks, block_size=16):
        self.num_blocks, self.block_size = num_blocks, block_size
        self.ref = [0] * num_blocks
        self.free_ids = list(range(num_blocks - 1, -1, -1))

    @property
    def num_free(self):
        return len(self.free_ids)

    def ref_count(self, b):
        if not 0 <= b < self.num_blocks:
            raise InvalidBlock(f"block {b} is not mine")
        return self.ref[b]

    def allocate(self, n=1):
        if n > len(self.free_ids):
            raise OutOfBlocks("short", requested=n, available=len(self.free_ids))
        ids = [self.free_ids.pop() for _ in range(n)]
        for b in ids:
            self.ref[b] = 1
        return ids

    def share(self, ids):
        if any(not 0 <= b < self.num_blocks or not self.ref[b] for b in ids):
            raise InvalidBlock("not in use")
        for b in ids:
            self.ref[b] += 1

    def release(self, ids):
        for b, times in Counter(ids).items():
            if not 0 <= b < self.num_blocks or times > self.ref[b]:
                raise InvalidBlock("double free")
        freed = []
        for b in ids:
            self.ref[b] -= 1
            if not self.ref[b]:
                self.free_ids.append(b)
                freed.append(b)
        return freed


POOL_OPS = st.lists(
    st.tuples(st.sampled_from("aaksrrRde"), st.floats(0, 0.999), st.integers(1, 3)),
    min_size=1,
    max_size=60,
)


@settings(max_examples=80, deadline=None)
@given(POOL_OPS)
def test_a_learners_pool_under_the_caching_layer_behaves_as_block_pool(ops):
    """Side by side on the same logical blocks: allocations, releases (their answers too),
    refusals, sizes, states, ref counts, evictions and snapshots agree with BlockPool's."""
    n = 8
    evicted = {"ours": [], "theirs": []}
    pools = {
        "ours": BlockPool(n, 4, eviction="lru", on_evict=evicted["ours"].append),
        "theirs": CachingPool(StackPool(n, 4), on_evict=evicted["theirs"].append),
    }
    held = {"ours": [], "theirs": []}  # the same logical references, side by side
    kept: list[tuple[int, int]] = []  # (ours, theirs): the same kept block, until evicted
    to_theirs: dict[int, int] = {}  # our block -> theirs, for what both return

    def agree():
        ours, theirs = pools["ours"], pools["theirs"]
        for query in ("num_free", "num_cached", "num_in_use", "num_available", "num_pages"):
            assert getattr(theirs, query) == getattr(ours, query), query
        assert theirs.evictions == ours.evictions
        gone = {name: set(ids) for name, ids in evicted.items()}
        assert {b for a, b in kept if a in gone["ours"]} == gone["theirs"]
        kept[:] = [(a, b) for a, b in kept if a not in gone["ours"]]
        evicted["ours"].clear()
        evicted["theirs"].clear()
        for a, b in [*zip(held["ours"], held["theirs"], strict=True), *kept]:
            assert theirs.ref_count(b) == ours.ref_count(a)
            assert theirs.is_shared(b) == ours.is_shared(a)
            assert theirs.state(b) == ours.state(a)
        snaps = {name: pool.snapshot() for name, pool in pools.items()}
        for state in BlockState:
            assert snaps["theirs"].count(state) == snaps["ours"].count(state)

    def both(call):
        """`call(name, pool)` on both pools: the same answer (mapped) or the same refusal."""
        results = {}
        for name, pool in pools.items():
            before = pool.snapshot()
            try:
                results[name] = call(name, pool)
            except (InvalidBlock, OutOfBlocks) as error:
                assert pool.snapshot() == before  # all or nothing
                results[name] = type(error)
        return results

    for op, x, k in ops:
        i = int(x * len(held["ours"])) if held["ours"] else 0
        if op == "a":
            got = both(lambda name, pool, k=k: pool.allocate(k))
            if got["ours"] is OutOfBlocks:
                assert got["theirs"] is OutOfBlocks
            else:
                to_theirs.update(zip(got["ours"], got["theirs"], strict=True))
                for name in pools:
                    held[name].extend(got[name])
        elif op == "e":
            got = both(lambda name, pool: pool.evict_all_cached())
            assert got["theirs"] == got["ours"]
        elif op == "d" and held["ours"]:  # a double free: refused by both, nothing changes
            got = both(lambda name, pool, i=i, k=k: pool.release([held[name][i]] * (k + 3)))
            assert got["ours"] is got["theirs"] is InvalidBlock
        elif op == "R" and len(held["ours"]) >= 2:  # a batch, several blocks at once
            got = both(lambda name, pool: pool.release([held[name].pop(), held[name].pop()]))
            assert [to_theirs[b] for b in got["ours"]] == got["theirs"]
        elif held["ours"]:
            pair = {name: held[name][i] for name in pools}
            if op == "k" and (pair["ours"], pair["theirs"]) not in kept:
                kept.append((pair["ours"], pair["theirs"]))
            if op == "k":
                both(lambda name, pool, pair=pair: pool.keep_content([pair[name]]))
            elif op == "s":
                both(lambda name, pool, pair=pair: pool.share([pair[name]]))
                for name in pools:
                    held[name].append(pair[name])
            else:
                got = both(lambda name, pool, i=i: pool.release([held[name].pop(i)]))
                assert [to_theirs[b] for b in got["ours"]] == got["theirs"]
        agree()


@pytest.mark.parametrize("bad", [-1, 8, "3", 2.5, None])
def test_the_caching_layer_refuses_ids_that_are_not_its_own(bad):
    pool = CachingPool(StackPool(8, 4))
    pool.allocate(8)
    for call in (
        lambda: pool.ref_count(bad),
        lambda: pool.state(bad),
        lambda: pool.is_shared(bad),
        lambda: pool.share([bad]),
        lambda: pool.release([bad]),
        lambda: pool.keep_content([bad]),
    ):
        with pytest.raises(InvalidBlock):
            call()
    assert [pool.ref_count(b) for b in range(8)] == [1] * 8  # nothing changed


def test_a_cached_block_has_no_reference_to_drop_or_keep_and_a_hit_revives_it():
    pool = CachingPool(StackPool(4, 4))
    a, _ = pool.allocate(2)
    pool.keep_content([a])
    assert pool.release([a]) == [a] and pool.num_cached == 1 and pool.ref_count(a) == 0
    for call in (pool.release, pool.keep_content):
        with pytest.raises(InvalidBlock):
            call([a])
    with pytest.raises(InvalidBlock, match="free"):
        pool.share([3])
    pool.share([a])
    assert pool.ref_count(a) == 1 and pool.num_cached == 0 and pool.base.ref_count(a) == 1


def test_a_kept_block_holds_one_reference_below_whatever_its_holders():
    """The layer's one reference below stands for all holders of a kept block; eviction for an
    allocation hands it on, a reset gives it back."""
    base = RefCountPool(4, 4)
    pool = CachingPool(base)
    [a] = pool.allocate(1)
    pool.share([a, a])
    pool.keep_content([a])
    assert (pool.ref_count(a), base.ref_count(a)) == (3, 1)
    pool.release([a, a, a])
    assert pool.state(a) is BlockState.CACHED and base.ref_count(a) == 1
    assert pool.allocate(4)[-1] == a  # evicted last: three free blocks came first
    assert pool.state(a) is BlockState.IN_USE and base.ref_count(a) == 1
    pool.keep_content([a])
    pool.release([a])
    assert pool.evict_all_cached() == 1 and base.ref_count(a) == 0 and base.num_free == 1


def test_a_release_answers_in_the_order_blocks_lost_their_last_reference():
    pool = BlockPool(8, 4)
    kept, plain, other = pool.allocate(3)
    pool.keep_content([kept])
    pool.share([plain])
    assert pool.release([plain, kept, other, plain]) == [kept, other, plain]
    assert pool.release_unchecked([]) == []
    a, b = pool.allocate(2)
    pool.keep_content([a])
    assert pool.release([a, b]) == [a, b]  # the kept block first: it lost its reference first


# The manager's unchecked pool calls and hash chain: the same results as the checked calls.


def _two_pools_in_the_same_state():
    pools = []
    for _ in range(2):
        evicted = []
        pool = BlockPool(8, 4, on_evict=evicted.append)
        kept, plain, shared = pool.allocate(3)
        pool.keep_content([kept])
        pool.share([shared])
        cached = pool.allocate(1)[0]
        pool.keep_content([cached])
        pool.release([cached])
        pools.append((pool, [kept, plain, shared], cached, evicted))
    return pools


def _state(pool: BlockPool):
    return pool.snapshot(), pool.num_free, pool.num_cached


def _eviction_order(pool: BlockPool, evicted: list[int]) -> list[int]:
    pool.evict_all_cached()  # in the policy's order
    return evicted


def test_release_unchecked_does_what_release_does():
    (checked, table, _, out), (unchecked, same, _, out_too) = _two_pools_in_the_same_state()
    freed = checked.release(table[::-1])
    assert unchecked.release_unchecked(same[::-1]) == freed == table[1::-1]
    assert _state(unchecked) == _state(checked)
    kept, plain, shared = table
    assert unchecked.state(kept) is BlockState.CACHED  # kept content: evictable
    assert unchecked.state(plain) is BlockState.FREE
    assert unchecked.ref_count(shared) == 1  # one holder left
    assert _eviction_order(unchecked, out_too) == _eviction_order(checked, out)


def test_share_unchecked_does_what_share_does_and_revives_a_cached_block():
    (checked, table, cached, _), (unchecked, same, _, _) = _two_pools_in_the_same_state()
    checked.share([cached, *table])
    unchecked.share_unchecked([cached, *same])
    assert _state(unchecked) == _state(checked)
    assert unchecked.state(cached) is BlockState.IN_USE and cached not in unchecked.policy
    assert unchecked.num_cached == 0


def test_keep_content_unchecked_makes_a_released_block_cached():
    pool = BlockPool(4, 4)
    block, other = pool.allocate(2)
    pool.keep_content_unchecked([block])
    pool.release([block, other])
    assert pool.state(block) is BlockState.CACHED and pool.state(other) is BlockState.FREE


def test_the_unchecked_calls_still_go_through_the_checks_of_the_pool_below():
    """The caching layer skips its own checks; a block it does not keep is counted below,
    whose calls are checked: a double free or a share of a free block changes nothing."""
    pool = CachingPool(RefCountPool(4, 4))
    [block] = pool.allocate(1)
    pool.release_unchecked([block])
    for call in (pool.release_unchecked, pool.share_unchecked):
        with pytest.raises(InvalidBlock):
            call([block])
    assert pool.num_free == 4


@pytest.mark.parametrize("n", [2.5, True, "3"])
def test_an_allocation_that_is_no_count_is_refused_even_when_it_would_evict(n):
    """`allocate` checks `n` itself: a count above the free blocks goes on to eviction, which
    the pool below never sees."""
    pool = BlockPool(4, 4)
    kept = pool.allocate(3)
    pool.keep_content(kept)
    pool.release(kept)  # 1 free, 3 cached
    with pytest.raises(InvalidArgument, match="allocate's n"):
        pool.allocate(n)
    assert (pool.num_free, pool.num_cached) == (1, 3)


def test_the_pool_below_refuses_more_blocks_than_are_free_and_says_what_it_is():
    """`RefCountPool` on its own (a learner's pool stands where it does): a short allocate is
    `OutOfBlocks` with its counts and changes nothing; its repr names its allocation."""
    base = RefCountPool(8, 4, blocks_per_page=4, allocation="pack_pages")
    base.allocate(5)
    with pytest.raises(OutOfBlocks) as refused:
        base.allocate(4)
    assert (refused.value.requested, refused.value.available, base.num_free) == (4, 3, 3)
    assert repr(base) == "RefCountPool(3/8 free, block_size=4, allocation='pack_pages')"


def _pools_with(policy):
    """The caching layer over the library's pool and over a learner's, with `policy`."""
    return [BlockPool(4, 2, eviction=policy()), CachingPool(StackPool(4, 2), eviction=policy())]


def _cached_then(pool):
    """Blocks 0..3 allocated, 0-2 kept, 1-3 released: 0 in use, 1 and 2 cached, 3 free."""
    assert pool.allocate(4) == [0, 1, 2, 3]
    pool.keep_content([0, 1, 2])
    pool.release([1, 2, 3])
    return pool


def _agrees_with_its_policy(pool):
    """Every cached block is a candidate of the policy, and no other block is."""
    for block_id in range(pool.num_blocks):
        assert (block_id in pool.policy) == (pool.state(block_id) is BlockState.CACHED)
    assert pool.num_cached == sum(b in pool.policy for b in range(pool.num_blocks))


class NamesItsVictim(LRU):
    """An LRU whose `evict` returns `victim` (without evicting) while `armed`."""

    name = "victim-namer"
    armed = True
    victim: object = None

    def evict(self):
        return type(self).victim if type(self).armed else super().evict()


@pytest.mark.parametrize("pool_index", [0, 1], ids=["library pool", "learner pool"])
@pytest.mark.parametrize("victim", [0, 3, 4, 10**6, -1, True, None, 2.0, "x"])
def test_an_evict_that_names_no_cached_block_is_refused_and_nothing_is_evicted(pool_index, victim):
    """A block in use (0) or free (3), an id out of range, a bool or no int at all: the pool
    refuses it as `InvalidBlock`, naming the policy and what it returned, before it counts an
    eviction or hands a block out; later, the policy is asked again and the pool is whole."""
    policy = type("Victim", (NamesItsVictim,), {"victim": victim})
    pool = _cached_then(_pools_with(policy)[pool_index])
    before = pool.snapshot()
    with pytest.raises(InvalidBlock, match=f"victim-namer.*returned {victim!r}") as refused:
        pool.allocate(2)
    assert "nothing was evicted" in str(refused.value)
    assert pool.snapshot() == before and pool.evictions == {"allocation": 0, "reset": 0}
    policy.armed = False
    got = pool.allocate(2)
    assert sorted(got) == [1, 3] and pool.evictions["allocation"] == 1  # 1: the LRU's victim
    assert pool.ref_count(0) == 1 and pool.num_cached == 1
    _agrees_with_its_policy(pool)


def test_a_victim_named_twice_in_one_allocation_is_evicted_once():
    """The second time, block 1 is in use (the allocation holds it): refused. The allocation
    fails; the first eviction
    stands (an eviction has no undo), counted once, and block 1 is free, not handed out."""
    policy = type("Victim", (NamesItsVictim,), {"victim": 1})
    pool = _cached_then(BlockPool(4, 2, eviction=policy()))
    with pytest.raises(InvalidBlock, match="returned 1: block 1, which is in use"):
        pool.allocate(3)
    assert pool.evictions["allocation"] == 1 and (pool.num_free, pool.num_cached) == (2, 1)
    assert [pool.state(b) for b in range(4)] == [
        BlockState.IN_USE,
        BlockState.FREE,
        BlockState.CACHED,
        BlockState.FREE,
    ]
    policy.armed = False
    assert sorted(pool.allocate(3)) == [1, 2, 3]  # the LRU was told: 1 is no candidate
    assert pool.evictions["allocation"] == 2
    _agrees_with_its_policy(pool)


class Interrupt(KeyboardInterrupt):
    """A Ctrl-C in the policy (a subclass, so that no real one is mistaken)."""


class FailsFromThen(LRU):
    """An LRU whose `arm(site)`-th next call named `site` raises `Interrupt`, and every call
    after it, of any method (the undo's too), until `disarm()`."""

    def __init__(self, **options):
        super().__init__(**options)
        self.site, self.failing, self.first = None, False, None

    def arm(self, site):
        self.site = site

    def disarm(self):
        self.site, self.failing = None, False

    def _enter(self, site):
        if self.failing or site == self.site:
            self.failing = True
            error = Interrupt(site)
            self.first = self.first or error
            raise error

    def touch(self, block_id):
        self._enter("touch")
        super().touch(block_id)

    def make_evictable(self, block_id):
        self._enter("make_evictable")
        super().make_evictable(block_id)

    def revive(self, block_id):
        self._enter("revive")
        super().revive(block_id)

    def forget(self, block_id):
        self._enter("forget")
        super().forget(block_id)

    def evict(self):
        self._enter("evict")
        return super().evict()


POOL_CALLS_UNDER_A_FAILING_POLICY = {
    "a hit's touch, then the undo's make_evictable": ("touch", lambda p: p.share([1, 2])),
    "a second release's make_evictable, then revive": (
        "make_evictable",
        lambda p: p.release([0, 4]),
    ),
    "keep_content's touch, then forget": ("touch", lambda p: p.keep_content([5, 0, 4])),
    "discard's forget, then the put back": ("forget", lambda p: p.discard([1, 2])),
    "evict": ("evict", lambda p: p.allocate(3)),
}


@pytest.mark.parametrize("pool_index", [0, 1], ids=["library pool", "learner pool"])
@pytest.mark.parametrize("case", sorted(POOL_CALLS_UNDER_A_FAILING_POLICY))
def test_a_policy_failing_again_while_a_call_is_undone_leaves_the_pool_whole(pool_index, case):
    """The policy raises in a call, then at every call of the undo: the first error goes on,
    the pool's blocks, ref counts and counts are as before, and once the policy answers again
    the pool tells it its candidates before using it, so every later call works."""
    site, call = POOL_CALLS_UNDER_A_FAILING_POLICY[case]
    pool = [BlockPool(8, 2), CachingPool(StackPool(8, 2))][pool_index]
    pool.policy = policy = FailsFromThen()
    assert pool.allocate(6) == [0, 1, 2, 3, 4, 5]
    pool.keep_content([0, 1, 2, 4])
    pool.release([1, 2])  # 0, 3, 4, 5 in use (0 and 4 kept); 1, 2 cached; 6, 7 free
    before = (pool.snapshot(), pool.num_cached, pool.num_in_use, dict(pool.evictions))
    policy.arm(site)
    with pytest.raises(Interrupt) as raised:
        call(pool)
    assert raised.value is policy.first
    assert (pool.snapshot(), pool.num_cached, pool.num_in_use, dict(pool.evictions)) == before
    policy.disarm()
    call(pool)  # the same call now works
    _agrees_with_its_policy(pool)
    pool.release([b for b in range(8) for _ in range(pool.ref_count(b))])
    cached = pool.num_blocks - pool.num_free
    assert pool.evict_all_cached() == cached
    assert pool.num_free == 8 and pool.num_cached == 0


class LiesAboutItsLength(LRU):
    def __len__(self):
        return 10**9


def test_the_pool_counts_its_cached_blocks_itself_not_by_the_policys_len():
    """A policy whose `len` lies changes no count: sizes, and a refusal past them."""
    pool = _cached_then(BlockPool(4, 2, eviction=LiesAboutItsLength()))
    assert (pool.num_free, pool.num_cached, pool.num_in_use, pool.num_available) == (1, 2, 1, 3)
    with pytest.raises(OutOfBlocks):
        pool.allocate(4)
    assert pool.evict_all_cached() == 2 and pool.num_free == 3
