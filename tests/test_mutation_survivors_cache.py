"""Behaviours that mutation testing (tools/mutation_test.py) found no test pinning, in the cache
layer: each test here kills at least one mutant that survived every other test of its module."""

import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from paged_kv import BlockPool, InvalidArgument, KVCacheManager
from paged_kv.cache.arc import ARC
from paged_kv.cache.block_table import slot_mapping
from paged_kv.cache.prefix_cache import PrefixCache
from paged_kv.cache.radix_cache import RadixCache
from paged_kv.cache.s3fifo import S3FIFO
from paged_kv.cache.sequence import TokenSequence
from paged_kv.cache.snapshot import BlockInfo, BlockState, PoolSnapshot
from paged_kv.cache.tinylfu import FrequencySketch, WTinyLFU

# -- block tables ---------------------------------------------------------------------------


@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=4),
    st.integers(1, 4),
    st.integers(-10, -1),
    st.integers(0, 16),
)
def test_slot_mapping_refuses_a_negative_start(table, block_size, start, end):
    """A negative position would wrap around to the last block and hand out its slots."""
    with pytest.raises(InvalidArgument):
        slot_mapping(table, block_size, start, end)


# -- S3-FIFO's main queue -------------------------------------------------------------------


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


def test_w_tinylfu_adapts_its_window_once_per_sample_of_touches():
    """A sample is `sample_factor` x blocks tracked touches (a miss is one touch); at its end
    the window's share moves one step toward a better hit ratio."""
    policy = WTinyLFU(window_ratio=0.25, sample_factor=2)
    policy.touch(0)  # a miss: 1 touch of the sample's 2
    assert policy.window_ratio == 0.25
    policy.touch(0)  # a hit ends the sample: hit ratio 1/2, better than 0
    assert policy.window_ratio == 0.25 + WTinyLFU.step_ratio


@pytest.mark.parametrize(("capacity", "sample_factor"), [(64, 16), (128, 8)])
def test_the_doorkeeper_spends_one_bit_per_sample(capacity, sample_factor):
    """TinyLFU's doorkeeper is a Bloom filter (two hashes) of one bit per sample, rounded up
    to a power of two: after half a sample of distinct keys, about a third of keys never seen
    look seen once (theory: (1 - e^-1)^2 = 0.40). Twice the bits would show about 0.15, half
    of them about 0.75: the rate pins the memory the filter costs."""
    sketch = FrequencySketch(capacity=capacity, sample_factor=sample_factor)
    assert sketch.sample_size == 1024  # a power of two: no rounding up
    for key in range(512):
        sketch.increment(key)
    unseen = range(10**6, 10**6 + 4000)
    false_positive_rate = sum(1 for k in unseen if sketch.estimate(k) >= 1) / len(unseen)
    assert 0.25 <= false_positive_rate <= 0.5


# -- ARC's ghosts --------------------------------------------------------------------------


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


# -- prefix indexes: content keys, forgetting, matching ---------------------------------------

BLOCK = 2
PROMPTS = st.lists(
    st.lists(st.integers(0, 2), min_size=BLOCK, max_size=5 * BLOCK), min_size=1, max_size=5
)


def _register(index, prompts):
    """Index each prompt's full blocks in fresh block ids; return its (sequence, table)."""
    next_id, out = 0, []
    for tokens in prompts:
        seq = TokenSequence(tokens)
        full = len(tokens) // BLOCK
        hits = index.match(seq, full)
        table = hits + list(range(next_id, next_id + full - len(hits)))
        next_id += full
        index.register_blocks(seq, table, len(hits), full, None)
        out.append((seq, table))
    return out


@settings(max_examples=150, deadline=None)
@given(PROMPTS, st.lists(st.integers(0, 2), max_size=5 * BLOCK))
@example(prompts=[[0, 0, 1, 1, 2, 2]], query=[0, 0, 2, 2, 1, 1])
@example(prompts=[[0, 0, 1, 1, 2, 2, 1, 1]], query=[0, 0, 2, 2, 1, 1, 1, 1])
def test_radix_matches_exactly_the_blocks_the_hash_chain_matches(prompts, query):
    """Both indexes hold the same prompts, so any query gets the same hits from each, even
    one that agrees with a long edge on its first block and then differs. (First of the
    index tests: the other tests match too, and a wrong match may loop forever.)"""
    radix, chain = RadixCache(BLOCK), PrefixCache(BLOCK)
    _register(radix, prompts)
    _register(chain, prompts)
    seq = TokenSequence(query)
    for max_blocks in range(len(query) // BLOCK + 1):
        assert radix.match(seq, max_blocks) == chain.match(seq, max_blocks)


@settings(max_examples=80, deadline=None)
@given(PROMPTS)
@pytest.mark.parametrize("make", [PrefixCache, RadixCache], ids=["hash", "radix"])
def test_content_keys_name_the_content_of_indexed_blocks(make, prompts):
    """Eviction policies remember a block by its content key: equal for the same prefix
    content, different otherwise, and none for a block the index does not hold."""
    index = make(BLOCK)
    content = {}  # indexed block -> its tokens from the start of the prompt to its end
    for seq, table in _register(index, prompts):
        for i, block in enumerate(table):
            content.setdefault(block, tuple(seq.token_ids[: (i + 1) * BLOCK]))
    indexed = [b for b in content if index.content_key(b) is not None]
    assert len(indexed) == len(index)
    for a in indexed:
        for b in indexed:
            same = index.content_key(a) == index.content_key(b)
            assert same == (content[a] == content[b]), (a, b)
    assert index.content_key(10_000) is None


@settings(max_examples=150, deadline=None)
@given(PROMPTS, st.lists(st.integers(0, 30), max_size=12))
@example(prompts=[[0, 0, 1, 1, 2, 2], [0, 0, 1, 1, 0, 0]], forgets=[0])
@example(prompts=[[0, 0, 1, 1, 2, 2]], forgets=[0, 2])
def test_radix_forgets_a_block_and_everything_indexed_after_it(prompts, forgets):
    """The pool may evict any block (not only leaves): the index then holds no block at or
    below it, never returns one from a match, and forgetting them again is harmless."""
    radix = RadixCache(BLOCK)
    registered = _register(radix, prompts)
    gone: set[int] = set()
    for block in forgets:
        radix.forget(block)
        for _seq, table in registered:
            if block in table:
                gone.update(table[table.index(block) :])
        in_tree = {b for _, node in radix.nodes() for b in node.blocks}
        assert not in_tree & gone
        assert len(radix) == len(in_tree)
        for b in gone:
            assert radix.content_key(b) is None and radix.lock_of(b) == 0
        for seq, _table in registered:
            assert not set(radix.match(seq, len(seq) // BLOCK)) & gone


@given(st.lists(st.integers(1, 3), min_size=2, max_size=5))
def test_a_sequence_growing_alone_stays_one_edge_of_the_tree(steps):
    """Registering a sequence's blocks as they fill extends its own leaf: one node, not a
    chain of one node per registration."""
    radix = RadixCache(BLOCK)
    rng = random.Random(len(steps))
    seq = TokenSequence([rng.randrange(5) for _ in range(steps[0] * BLOCK)])
    table = list(range(steps[0]))
    _, path = radix.register_blocks(seq, table, 0, steps[0], None)
    for more in steps[1:]:
        start = len(table)
        seq.append([rng.randrange(5) for _ in range(more * BLOCK)])
        table += range(start, start + more)
        _, path = radix.register_blocks(seq, table, start, len(table), path)
    assert [node.blocks for _, node in radix.nodes()] == [table]
    assert radix.match(seq, len(table)) == table


# -- token sequences ------------------------------------------------------------------------


@pytest.mark.parametrize("block_size", [0, -4, 2.0, "4"])
def test_a_sequence_refuses_a_block_size_that_is_not_a_positive_int(block_size):
    """Fresh, or already hashed at another size: never a silent empty list or a crash."""
    fresh, hashed = TokenSequence(range(8)), TokenSequence(range(8))
    hashed.full_block_hashes(4)
    for seq in (fresh, hashed):
        with pytest.raises(InvalidArgument):
            seq.full_block_hashes(block_size)


# -- the manager's live sequences -----------------------------------------------------------


@given(st.lists(st.tuples(st.sampled_from("af"), st.integers(0, 3)), max_size=20))
def test_the_manager_says_which_sequences_are_live(ops):
    manager, live = KVCacheManager(num_blocks=64, block_size=4), set()
    for op, seq_id in ops:
        if op == "a" and seq_id not in live:
            manager.add_sequence(seq_id, [1, 2, 3, 4, 5])
            live.add(seq_id)
        elif op == "f" and seq_id in live:
            manager.free_sequence(seq_id)
            live.discard(seq_id)
        assert {s for s in range(4) if s in manager} == live
        assert len(manager) == len(live) and sorted(manager.sequence_ids) == sorted(live)


# -- snapshots ------------------------------------------------------------------------------

POOL_OPS = st.lists(
    st.tuples(st.sampled_from("aaksrre"), st.floats(0, 0.999)), min_size=1, max_size=60
)


@settings(max_examples=60, deadline=None)
@given(POOL_OPS)
def test_a_snapshot_counts_each_state_as_the_pool_does(ops):
    pool, held = BlockPool(8, 4), []
    for op, x in ops:
        if op == "a" and pool.num_available:
            held += pool.allocate(1)
        elif op == "k" and held:
            pool.keep_content([held[int(x * len(held))]])
        elif op in "rs" and held:
            i = int(x * len(held))
            if op == "s":
                pool.share([held[i]])
                held.append(held[i])
            else:
                pool.release([held.pop(i)])
        snap = pool.snapshot()
        assert snap.count(BlockState.FREE) == pool.num_free
        assert snap.count(BlockState.CACHED) == pool.num_cached
        assert snap.count(BlockState.IN_USE) == pool.num_in_use


@given(
    st.integers(1, 4),
    st.dictionaries(
        st.sampled_from("abc"),
        st.tuples(st.lists(st.integers(0, 5), max_size=4, unique=True), st.integers(0, 16)),
        max_size=3,
    ),
)
def test_a_snapshot_counts_the_tokens_each_block_holds(block_size, tables):
    """A block's token count is the most any holder has written to it: 0 to block_size, 0
    for a block a table reserved past its sequence's end."""
    blocks = tuple(BlockInfo(b, BlockState.IN_USE, 1) for b in range(6))
    snap = PoolSnapshot(block_size, None, blocks).with_tables(tables)
    for info in snap.blocks:
        expected = [
            min(block_size, max(0, length - i * block_size))
            for table, length in tables.values()
            for i, b in enumerate(table)
            if b == info.block_id
        ]
        assert info.num_tokens == max(expected, default=0)
        assert 0 <= info.num_tokens <= block_size
