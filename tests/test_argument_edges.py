"""The cache layer's argument checks at their edges, and its documented defaults.

Each check is tried at the last good value and the first bad one (0 and 1, a divisor and a
non-divisor, bools, which are ints to Python). A bad value raises `InvalidArgument` (a
`ValueError`) and changes nothing."""

import math

import pytest

from paged_kv import LRU, BlockPool, InvalidArgument, KVCacheManager
from paged_kv.cache import PrefixHitCounter

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


def test_the_smallest_manager_works_at_its_limits():
    m = KVCacheManager(1, 1)
    assert m.add_sequence("a", [5]) == m.block_table("a")
    assert not m.can_append("a", 1) and m.can_append("a", 0)
    assert m.can_allocate(0) and not m.can_allocate(1)
    m.free_sequence("a")
    assert m.can_allocate(1) and not m.can_allocate(2)
    m3 = KVCacheManager(3, 1)
    assert len(m3.add_sequence("a", [1, 2, 3])) == 3  # block_size 1: one block per token


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


@pytest.mark.parametrize("bad", BAD_COUNTS)
def test_hit_rate_window_must_be_a_positive_int(bad):
    with pytest.raises(InvalidArgument, match="window"):
        KVCacheManager(8, 4, hit_rate_window=bad)
    with pytest.raises(InvalidArgument, match="window"):
        PrefixHitCounter(bad)


def test_a_hit_rate_window_of_one_keeps_the_latest_request_only():
    m = KVCacheManager(16, 4, hit_rate_window=1)
    m.add_sequence("a", list(range(9)))
    m.add_sequence("b", list(range(9)))  # 8 of 9 hit
    rates = m.hit_rates()
    assert (rates.window_requests, rates.window_queried_tokens, rates.window_hit_tokens) == (
        1,
        9,
        8,
    )
    assert (rates.queried_tokens, rates.hit_tokens) == (18, 8)
    m.add_sequence("c", [50] * 5)  # no hits; b's 8 hit tokens leave the window
    rates = m.hit_rates()
    assert (rates.window_requests, rates.window_queried_tokens, rates.window_hit_tokens) == (
        1,
        5,
        0,
    )
    assert (rates.queried_tokens, rates.hit_tokens) == (23, 8)


def test_allocation_and_eviction_names_are_checked():
    with pytest.raises(InvalidArgument, match="allocation"):
        KVCacheManager(8, 4, allocation="best_fit")
    with pytest.raises(InvalidArgument, match="pack_pages"):
        KVCacheManager(8, 4, allocation="pack_pages")  # needs pages
    with pytest.raises(InvalidArgument):
        KVCacheManager(8, 4, eviction="mru")


def test_documented_defaults():
    m = KVCacheManager(8)
    assert m.block_size == 16 and m.pool.block_size == 16
    assert isinstance(m.pool.policy, LRU)  # eviction="lru"
    assert m.pool.blocks_per_page is None and m.pool.allocation == "fifo"
    m.add_sequence("a", list(range(17)))
    m.add_sequence("b", list(range(17)))
    assert m.num_cached_tokens("b") == 16  # prefix caching is on
    assert BlockPool(8).block_size == 16
    counter = KVCacheManager(200, 1)
    for i in range(101):
        counter.add_sequence(i, [i])
    assert counter.hit_rates().window_requests == 100  # hit_rate_window=100
    assert PrefixHitCounter().window == 100


# -- calls on a live manager: bad values raise and change nothing ---------------------------


@pytest.fixture
def live():
    m = KVCacheManager(8, 4)
    m.add_sequence("a", list(range(6)))
    m.fork("a", "b")
    return m


def state(m: KVCacheManager):
    return m.snapshot(), m.stats(), m.hit_rates(), {s: m.token_ids(s) for s in m.sequence_ids}


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.can_allocate(-1),
        lambda m: m.can_allocate(True),
        lambda m: m.can_allocate(1.0),
        lambda m: m.can_append("a", -1),
        lambda m: m.can_append("a", False),
        lambda m: m.add_sequence("c", []),
        lambda m: m.add_sequence("c", [1, -1]),
        lambda m: m.add_sequence("c", [1, True]),
        lambda m: m.add_sequence("c", [1, 2.0]),
        lambda m: m.add_sequence("c", [1], salt=5),
        lambda m: m.append_tokens("a", [-1]),
        lambda m: m.append_tokens("a", [3, False]),
        lambda m: m.num_prefix_hit_tokens([True]),
        lambda m: m.slot_mapping("a", 0, 7),
        lambda m: m.slot_mapping("a", -1),
        lambda m: m.slot_mapping("a", 4, 3),
    ],
)
def test_bad_values_raise_invalid_argument_and_change_nothing(live, call):
    before = state(live)
    with pytest.raises(InvalidArgument) as raised:
        call(live)
    assert isinstance(raised.value, ValueError)
    assert state(live) == before


def test_the_last_good_values_are_accepted(live):
    assert live.can_allocate(0) and live.can_append("a", 0)
    assert live.slot_mapping("a", 0, 6) == live.slot_mapping("a")
    assert live.slot_mapping("a", 6, 6) == [] and live.slot_mapping("a", 0, 0) == []
    assert live.append_tokens("a", []) == []
    assert live.add_sequence("c", [0], salt="") == live.block_table("c")
    assert live.add_sequence("d", [0], salt=b"") == live.block_table("d")


def test_nan_is_no_count():
    with pytest.raises(InvalidArgument):
        KVCacheManager(8, 4).can_allocate(math.nan)


def test_an_empty_prompt_is_refused_as_such(live):
    before = state(live)
    for empty in ([], (), iter([])):
        with pytest.raises(InvalidArgument, match="at least one prompt token"):
            live.add_sequence("c", empty)
    assert state(live) == before


@pytest.mark.parametrize(
    "length, good, bad",
    [
        (13, [0, 4, 8, 12], [16, 3, 13, -4, True, 4.0]),  # room: 3 whole blocks
        (12, [0, 4, 8], [12, 2]),  # the last prompt token is always computed
        (1, [0], [4, 1]),  # no room at all
    ],
)
def test_loaded_tokens_are_whole_blocks_before_the_last_prompt_token(length, good, bad):
    m = KVCacheManager(16, 4)
    for i, loaded in enumerate(good):
        m.add_sequence(i, [100 + i] * length, num_loaded_tokens=loaded)
        assert m.num_cached_tokens(i) == loaded
    before = state(m)
    for loaded in bad:
        with pytest.raises(InvalidArgument, match="num_loaded_tokens"):
            m.add_sequence("x", [7] * length, num_loaded_tokens=loaded)
    assert state(m) == before


def test_loaded_tokens_come_after_the_prefix_hits():
    m = KVCacheManager(16, 4)
    m.add_sequence("a", [*range(8), 99])  # registers two full blocks
    prompt = [*range(8), *range(50, 55)]  # 13 tokens: 2 blocks hit, room for 1 more
    m.add_sequence("b", prompt, num_loaded_tokens=4)
    assert m.num_cached_tokens("b") == 12
    before = state(m)
    with pytest.raises(InvalidArgument, match="num_loaded_tokens"):
        m.add_sequence("c", prompt, num_loaded_tokens=8)
    assert state(m) == before
