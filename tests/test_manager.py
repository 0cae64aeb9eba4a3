import contextlib
from collections import Counter
from dataclasses import replace
from typing import Any, cast

import numpy as np
import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from test_block_pool import STEPS

import paged_kv.cache.manager as manager_module
from paged_kv import (
    LRU,
    BlockPool,
    BlockState,
    CacheBusy,
    DuplicateSequence,
    EvictionPolicy,
    InvalidArgument,
    InvalidBlock,
    KVCacheManager,
    OutOfBlocks,
    PagedKVError,
    UnknownSequence,
)
from paged_kv.cache import PrefixHitCounter
from paged_kv.cache.block_table import blocks_needed
from paged_kv.cache.radix_cache import RadixCache


def test_prompt_gets_just_enough_blocks_and_decode_adds_one_when_full():
    m = KVCacheManager(8, 4)
    table = m.add_sequence("a", range(6))
    assert len(table) == 2
    assert m.append_tokens("a", [1]) == []  # 7 tokens: still 2 blocks
    assert m.append_tokens("a", [2]) == []  # 8 tokens: 2 full blocks
    [new] = m.append_tokens("a", [3])  # token 9 opens block 3
    assert m.block_table("a") == [*table, new]
    assert m.num_tokens("a") == 9
    assert m.token_ids("a") == [0, 1, 2, 3, 4, 5, 1, 2, 3]


def test_slot_mapping_follows_the_block_table():
    m = KVCacheManager(8, 4)
    m.add_sequence("x", [0])  # takes block 0
    m.add_sequence("a", range(6))  # blocks 1, 2
    m.free_sequence("x")
    assert m.block_table("a") == [1, 2]
    assert m.slot_mapping("a") == [4, 5, 6, 7, 8, 9]
    assert m.slot_mapping("a", 4, 6) == [8, 9]
    with pytest.raises(InvalidArgument):
        m.slot_mapping("a", 0, 7)


def test_free_returns_every_block():
    m = KVCacheManager(8, 4)
    m.add_sequence("a", range(9))
    m.free_sequence("a")
    assert m.pool.num_in_use == 0 and m.pool.num_available == 8 and "a" not in m and len(m) == 0


def test_can_allocate_and_can_append_match_what_fits():
    m = KVCacheManager(3, 4)
    assert m.can_allocate(12) and not m.can_allocate(13)
    m.add_sequence("a", range(8))
    assert m.can_append("a", 4) and not m.can_append("a", 5)


def test_stats_count_tokens_and_internal_fragmentation():
    m = KVCacheManager(10, 4)
    m.add_sequence("a", range(5))
    m.add_sequence("b", range(4))
    s = m.stats()
    assert (s.num_in_use_blocks, s.num_free_blocks, s.num_tokens, s.num_sequences) == (3, 7, 9, 2)
    assert s.usage == pytest.approx(0.3)
    assert s.num_table_blocks == 3 and s.blocks_saved_by_sharing == 0
    assert s.internal_fragmentation == pytest.approx(3 / 12)


def test_snapshot_names_owners_and_filled_tokens():
    m = KVCacheManager(4, 4, blocks_per_page=2)
    m.add_sequence("a", range(6))
    snap = m.snapshot()
    assert snap.block_tables == {"a": (0, 1)}
    assert [b.owners for b in snap.blocks] == [("a",), ("a",), (), ()]
    assert [b.num_tokens for b in snap.blocks] == [4, 2, 0, 0]
    assert [b.state for b in snap.blocks][:2] == [BlockState.IN_USE] * 2
    assert snap.free_pages() == [1]


def test_numpy_and_torch_token_ids_are_accepted_as_ints():
    m = KVCacheManager(4, 4)
    m.add_sequence("a", np.arange(3))
    m.append_tokens("a", torch.tensor([5, 6]))
    assert m.token_ids("a") == [0, 1, 2, 5, 6]
    assert all(type(t) is int for t in m.token_ids("a"))


def test_sequence_ids_are_listed_oldest_first():
    m = KVCacheManager(4, 4)
    for s in ("c", "a", "b"):
        m.add_sequence(s, [1])
    assert m.sequence_ids == ["c", "a", "b"]


# -- bad input: typed errors, state unchanged ---------------------------------------------


def prepared():
    m = KVCacheManager(4, 4)
    m.add_sequence("a", range(5))
    m.add_sequence("b", range(4))
    return m


def state(m):
    return m.snapshot(), m.stats(), {s: m.token_ids(s) for s in m.sequence_ids}


@pytest.mark.parametrize(
    ("action", "error"),
    [
        (lambda m: m.add_sequence("a", [1]), DuplicateSequence),
        (lambda m: m.add_sequence("c", []), InvalidArgument),
        (lambda m: m.add_sequence("c", [1, -2]), InvalidArgument),
        (lambda m: m.add_sequence("c", [1, 2.0]), InvalidArgument),
        (lambda m: m.add_sequence("c", [True]), InvalidArgument),
        (lambda m: m.add_sequence("c", range(9)), OutOfBlocks),
        (lambda m: m.append_tokens("zz", [1]), UnknownSequence),
        (lambda m: m.append_tokens("b", range(9)), OutOfBlocks),
        (lambda m: m.append_tokens("a", ["x"]), InvalidArgument),
        (lambda m: m.free_sequence("zz"), UnknownSequence),
        (lambda m: m.free_sequence(["unhashable"]), UnknownSequence),
        (lambda m: m.block_table("zz"), UnknownSequence),
        (lambda m: m.slot_mapping("a", 3, 2), InvalidArgument),
        (lambda m: m.can_allocate(-1), InvalidArgument),
        (lambda m: m.can_append("a", -1), InvalidArgument),
        (lambda m: KVCacheManager(0), InvalidArgument),
    ],
)
def test_bad_calls_raise_typed_errors_and_change_nothing(action, error):
    m = prepared()
    before = state(m)
    with pytest.raises(error):
        action(m)
    assert state(m) == before


def test_appending_to_a_freed_sequence_is_an_unknown_sequence():
    m = prepared()
    m.free_sequence("a")
    with pytest.raises(UnknownSequence, match="add_sequence"):
        m.append_tokens("a", [1])


def test_out_of_blocks_message_says_what_to_do():
    m = prepared()
    with pytest.raises(OutOfBlocks, match=r"needs 2 new blocks \(1 more are prefix hits\)"):
        m.add_sequence("c", range(12))  # its first block is a's


@pytest.mark.parametrize("index", ["hash", "radix"])
def test_the_pools_policy_is_made_with_the_prefix_indexs_content_key(index):
    manager = KVCacheManager(8, 4, eviction="s3fifo", prefix_index=index)
    table = manager.add_sequence("a", list(range(9)))
    policy = getattr(manager.pool.policy, "inner", manager.pool.policy)  # radix: LeafFirst's
    assert policy.key_of is not None and manager.prefix_cache is not None
    key = manager.prefix_cache.content_key(table[0])
    assert key is not None and policy.content_key(table[0]) == key
    assert KVCacheManager(8, 4, prefix_caching=False).pool.policy.key_of is None


def _busy_manager(**kwargs) -> KVCacheManager:
    m = KVCacheManager(12, 4, **kwargs)
    m.add_sequence("a", list(range(10)), salt="t")
    m.add_sequence("b", list(range(9)), salt="t")  # two hit blocks
    m.append_tokens("a", [7, 7, 7])
    m.free_sequence("b")
    return m


@pytest.mark.parametrize("index", ["hash", "radix"])
@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copied_manager_is_independent_and_behaves_the_same(index, how):
    import copy
    import pickle

    m = _busy_manager(prefix_index=index, eviction="s3fifo")
    twin = copy.deepcopy(m) if how == "deepcopy" else pickle.loads(pickle.dumps(m))
    assert twin.snapshot() == m.snapshot() and repr(twin) == repr(m)
    for manager in (m, twin):  # the same calls, the same answers, evictions included
        assert manager.add_sequence("c", list(range(9)), salt="t")[:2] == m.block_table("a")[:2]
        manager.add_sequence("d", list(range(50, 75)))
    assert twin.snapshot() == m.snapshot() and twin.stats() == m.stats()
    twin.free_sequence("a")
    assert "a" in m and twin.snapshot() != m.snapshot()  # the original did not see that


@pytest.mark.parametrize("token", [2**63, 2**70, -1])
def test_token_ids_the_hashes_cannot_encode_are_refused_before_anything_changes(token):
    m = KVCacheManager(8, 4)
    with pytest.raises(InvalidArgument, match="token ids"):
        m.add_sequence("a", [1, 2, 3, token])
    m.add_sequence("a", [1, 2])
    snap = m.snapshot()
    for tokens in ([token], [5, token]):  # the one-token decode path, and the general one
        with pytest.raises(InvalidArgument, match="token ids"):
            m.append_tokens("a", tokens)
        assert m.snapshot() == snap and m.token_ids("a") == [1, 2]
    m.append_tokens("a", [2**63 - 1, 2**63 - 1])  # the largest fills a block and hashes
    assert m.stats().num_tokens == 4 and m.append_tokens("a", [0]) != []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"extra_keys": (1.5,)}, "extra keys"),  # once refused only when a block filled
        ({"extra_keys": ({1, 2},)}, "extra keys"),
        ({"extra_keys": (True,)}, "not bool"),
        ({"extra_keys": "img"}, "sequence of keys"),
        ({"extra_keys": 5}, "sequence of keys"),
        ({"extra_keys": ("\ud800",)}, "UTF-8"),
        ({"salt": "\ud800"}, "UTF-8"),
    ],
)
def test_keys_and_salts_the_hashes_cannot_encode_are_refused_at_add(kwargs, match):
    m = KVCacheManager(8, 4)
    with pytest.raises(InvalidArgument, match=match):
        m.add_sequence("a", [1, 2], **kwargs)  # one token: no block is full yet
    assert len(m) == 0 and m.stats().num_free_blocks == 8


def test_an_unhashable_sequence_id_is_a_typed_error_everywhere():
    m = KVCacheManager(8, 4)
    m.add_sequence("a", [1, 2, 3])
    snap = m.snapshot()
    with pytest.raises(InvalidArgument, match="hashable"):
        m.add_sequence(cast(Any, ["x"]), [1, 2])
    with pytest.raises(InvalidArgument, match="hashable"):
        m.fork("a", cast(Any, {"x": 1}))
    with pytest.raises(UnknownSequence):
        m.fork(cast(Any, ["a"]), "b")
    with pytest.raises(UnknownSequence):
        m.append_tokens(cast(Any, ["a"]), [1])
    assert m.snapshot() == snap and m.sequence_ids == ["a"]


@pytest.mark.parametrize("index", ["hash", "radix"])
def test_discard_unwritten_forgets_cached_blocks_and_leaves_the_rest(index):
    m = KVCacheManager(8, 4, prefix_index=index)
    m.add_sequence("a", list(range(13)))  # blocks 0-2 full and indexed, 3 partial
    table = m.block_table("a")
    m.add_sequence("b", list(range(6)))  # holds block 0 (a hit) and its own
    m.free_sequence("a")
    m.discard_unwritten([table[3], table[2], table[1], table[0]])  # deepest first
    assert m.num_prefix_hit_tokens(list(range(13))) == 4  # block 0 stays: "b" holds it
    assert [m.pool.state(b) for b in table] == [BlockState.IN_USE] + [BlockState.FREE] * 3
    assert m.stats().evictions == 0


BAD_TOKENS = [[2**63], [-1], [1.5], ["a"], None, 3]


class RefusalMachine(RuleBasedStateMachine):
    """Manager calls, valid and not: after each refused call the snapshot, the counts and the
    live sequences are what they were."""

    def __init__(self) -> None:
        super().__init__()
        self.m = KVCacheManager(10, 4, prefix_index="radix", eviction="arc")
        self.next_id = 0

    def observed(self) -> tuple[object, ...]:
        m = self.m
        tokens = {s: m.token_ids(s) for s in m.sequence_ids}
        tree = m.prefix_cache
        assert isinstance(tree, RadixCache)
        return m.snapshot(), m.stats(), tokens, tree.format_tree()

    def refused(self, call, error=PagedKVError) -> None:
        before = self.observed()
        with pytest.raises(error):
            call()
        assert self.observed() == before

    @rule(prompt=st.lists(st.integers(0, 9), min_size=1, max_size=12))
    def add(self, prompt):
        try:
            self.m.add_sequence(self.next_id, prompt)
        except OutOfBlocks:
            return
        self.next_id += 1

    @rule(
        bad=st.sampled_from(
            [("tokens", t) for t in BAD_TOKENS]
            + [("extra_keys", k) for k in [(1.5,), "img", ({1},)]]
            + [("salt", s) for s in ["\ud800", 5]]
            + [("seq_id", ["x"]), ("duplicate", None), ("empty", [])]
        )
    )
    def add_refused(self, bad):
        what, value = bad
        seq_id, tokens, kwargs = self.next_id, [1, 2, 3], {}
        if what == "tokens" or what == "empty":
            tokens = value
        elif what == "seq_id":
            seq_id = value
        elif what == "duplicate":
            if not self.m.sequence_ids:
                return
            seq_id = self.m.sequence_ids[0]
        else:
            kwargs = {what: value}
        self.refused(lambda: self.m.add_sequence(seq_id, tokens, **kwargs))

    @precondition(lambda self: len(self.m) > 0)
    @rule(data=st.data(), n=st.integers(1, 5))
    def append(self, data, n):
        seq = data.draw(st.sampled_from(self.m.sequence_ids))
        with contextlib.suppress(OutOfBlocks):
            self.m.append_tokens(seq, [3] * n)

    @precondition(lambda self: len(self.m) > 0)
    @rule(data=st.data(), bad=st.sampled_from(BAD_TOKENS))
    def append_refused(self, data, bad):
        seq = data.draw(st.sampled_from(self.m.sequence_ids))
        self.refused(lambda: self.m.append_tokens(seq, bad))
        self.refused(lambda: self.m.append_tokens("nobody", [1]), UnknownSequence)

    @precondition(lambda self: len(self.m) > 0)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(self.m.sequence_ids))
        self.m.fork(parent, self.next_id)
        self.next_id += 1
        self.m.pop_block_copies()

    @precondition(lambda self: len(self.m) > 0)
    @rule(data=st.data(), child=st.sampled_from([["x"], "existing"]))
    def fork_refused(self, data, child):
        parent = data.draw(st.sampled_from(self.m.sequence_ids))
        child = parent if child == "existing" else child
        self.refused(lambda: self.m.fork(parent, child))
        self.refused(lambda: self.m.fork(cast(Any, ["x"]), self.next_id), UnknownSequence)

    @precondition(lambda self: len(self.m) > 0)
    @rule(data=st.data())
    def free(self, data):
        self.m.free_sequence(data.draw(st.sampled_from(self.m.sequence_ids)))

    @rule(bad=st.sampled_from(["nobody", ["x"], None]))
    def free_refused(self, bad):
        self.refused(lambda: self.m.free_sequence(bad), UnknownSequence)


TestRefusalMachine = RefusalMachine.TestCase
TestRefusalMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


# The cache layer's argument checks at their edges, and its documented defaults.


def test_the_smallest_manager_works_at_its_limits():
    m = KVCacheManager(1, 1)
    assert m.add_sequence("a", [5]) == m.block_table("a")
    assert not m.can_append("a", 1) and m.can_append("a", 0)
    assert m.can_allocate(0) and not m.can_allocate(1)
    m.free_sequence("a")
    assert m.can_allocate(1) and not m.can_allocate(2)
    m3 = KVCacheManager(3, 1)
    assert len(m3.add_sequence("a", [1, 2, 3])) == 3  # block_size 1: one block per token


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


@pytest.fixture
def live():
    m = KVCacheManager(8, 4)
    m.add_sequence("a", list(range(6)))
    m.fork("a", "b")
    return m


def state_with_hit_rates(m: KVCacheManager):
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
    before = state_with_hit_rates(live)
    with pytest.raises(InvalidArgument) as raised:
        call(live)
    assert isinstance(raised.value, ValueError)
    assert state_with_hit_rates(live) == before


def test_the_last_good_values_are_accepted(live):
    assert live.can_allocate(0) and live.can_append("a", 0)
    assert live.slot_mapping("a", 0, 6) == live.slot_mapping("a")
    assert live.slot_mapping("a", 6, 6) == [] and live.slot_mapping("a", 0, 0) == []
    assert live.append_tokens("a", []) == []
    assert live.add_sequence("c", [0], salt="") == live.block_table("c")
    assert live.add_sequence("d", [0], salt=b"") == live.block_table("d")


def test_an_empty_prompt_is_refused_as_such(live):
    before = state_with_hit_rates(live)
    for empty in ([], (), iter([])):
        with pytest.raises(InvalidArgument, match="at least one prompt token"):
            live.add_sequence("c", empty)
    assert state_with_hit_rates(live) == before


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
    before = state_with_hit_rates(m)
    for loaded in bad:
        with pytest.raises(InvalidArgument, match="num_loaded_tokens"):
            m.add_sequence("x", [7] * length, num_loaded_tokens=loaded)
    assert state_with_hit_rates(m) == before


def test_loaded_tokens_come_after_the_prefix_hits():
    m = KVCacheManager(16, 4)
    m.add_sequence("a", [*range(8), 99])  # registers two full blocks
    prompt = [*range(8), *range(50, 55)]  # 13 tokens: 2 blocks hit, room for 1 more
    m.add_sequence("b", prompt, num_loaded_tokens=4)
    assert m.num_cached_tokens("b") == 12
    before = state_with_hit_rates(m)
    with pytest.raises(InvalidArgument, match="num_loaded_tokens"):
        m.add_sequence("c", prompt, num_loaded_tokens=8)
    assert state_with_hit_rates(m) == before


# Token id 0 is a token like any other: in prompts, appends, hashes, the engine and the byte
# tokenizer (it is the NUL byte). A falsy-value check (`if token:`, `0 < t`) anywhere would
# drop or refuse it.


def test_the_manager_stores_hashes_and_finds_zeros():
    m = KVCacheManager(16, 4)
    assert m.add_sequence("a", [0] * 9) == m.block_table("a")
    assert m.num_tokens("a") == 9 and m.token_ids("a") == [0] * 9
    assert m.append_tokens("a", [0, 0, 0]) == []  # fills the third block
    assert m.token_ids("a") == [0] * 12 and m.num_tokens("a") == 12
    assert len(m.append_tokens("a", [0])) == 1  # the 13th token needs a fourth block
    assert m.token_ids("a") == [0] * 13
    assert m.num_prefix_hit_tokens([0] * 13) == 12  # all three full blocks of zeros hit
    assert m.num_prefix_hit_tokens([1] * 13) == 0
    m.add_sequence("b", [0] * 13)
    assert m.num_cached_tokens("b") == 12
    assert m.block_table("b")[:3] == m.block_table("a")[:3]
    assert m.stats().num_tokens == 26


# `OutOfBlocks.requested` and `.available` when a new sequence's prefix hits revive cached
# blocks: the hits are not counted among the blocks the rest of the prompt could have, since
# sharing them takes them out of the cached (evictable) ones.


BS = 4


SYSTEM = list(range(100, 108))  # two full blocks


def holders(m: KVCacheManager, count: int) -> list[str]:
    """`count` one-token sequences, one block each: freeing one frees exactly one block."""
    names = [f"h{i}" for i in range(count)]
    for i, name in enumerate(names):
        m.add_sequence(name, [1000 + i])
    return names


@pytest.mark.parametrize("live_first_block", [False, True])
def test_available_excludes_the_cached_blocks_the_hits_revive(live_first_block):
    m = KVCacheManager(10, BS)
    m.add_sequence("a", [*SYSTEM, 1])  # 3 blocks; the two full ones are registered
    if live_first_block:  # the first hit block stays in use: a hit, but nothing revived
        m.add_sequence("c", [*SYSTEM[:4], 2])
    m.free_sequence("a")  # its full blocks become cached, the partial one free
    held = holders(m, m.stats().num_free_blocks - 2)  # leave 2 blocks free
    stats = m.stats()
    revived = 1 if live_first_block else 2
    assert stats.num_free_blocks == 2 and stats.num_cached_blocks == revived
    prompt = [*SYSTEM, *range(16)]  # 6 blocks: 2 hits, 4 to allocate
    assert m.num_prefix_hit_tokens(prompt) == 8
    snapshot = m.snapshot()

    with pytest.raises(OutOfBlocks) as refused:
        m.add_sequence("b", prompt)
    real = stats.num_free_blocks + stats.num_cached_blocks - revived
    assert refused.value.requested == 4
    assert refused.value.available == real == 2
    assert m.snapshot() == snapshot and "b" not in m

    # Exactly `requested - available` more blocks are needed: one short still fails...
    m.free_sequence(held.pop())
    with pytest.raises(OutOfBlocks) as still:
        m.add_sequence("b", prompt)
    assert (still.value.requested, still.value.available) == (4, 3)
    # ...and with that many freed, the add succeeds and uses up every block there was.
    m.free_sequence(held.pop())
    table = m.add_sequence("b", prompt)
    assert m.num_cached_tokens("b") == 8 and len(table) == 6
    stats = m.stats()
    assert stats.num_free_blocks == 0 and stats.num_cached_blocks == 0


def test_available_when_nothing_is_cached_is_the_free_count():
    m = KVCacheManager(6, BS)
    m.add_sequence("x", list(range(9)))  # 3 blocks, 2 registered but in use
    with pytest.raises(OutOfBlocks) as refused:
        m.add_sequence("y", list(range(50, 67)))  # 5 blocks, no hits
    assert (refused.value.requested, refused.value.available) == (5, 3)
    with pytest.raises(OutOfBlocks) as hits_in_use:
        m.add_sequence("z", [*range(9), *range(60, 72)])  # 2 hits in use, 4 more needed
    assert (hits_in_use.value.requested, hits_in_use.value.available) == (4, 3)


# The manager's unchecked pool calls and hash chain: the same results as the checked calls.


def test_a_freed_table_becomes_evictable_last_block_first():
    m = KVCacheManager(4, 4)
    table = m.add_sequence("a", list(range(16)))
    m.free_sequence("a")
    assert m.pool.num_cached == 4
    assert [m.pool.allocate(1)[0] for _ in range(4)] == table[::-1]  # LRU evicts the tail first


def test_a_new_sequence_indexes_only_the_blocks_after_its_hits():
    m = KVCacheManager(16, 4)
    m.add_sequence("a", list(range(13)))  # blocks 0-2 full and indexed
    starts = []
    register = m.prefix_cache.register_hashes

    def spy(table, start, hashes):
        starts.append(start)
        return register(table, start, hashes)

    m.prefix_cache.register_hashes = spy
    m.add_sequence("b", list(range(17)))
    assert m.num_cached_tokens("b") == 12 and starts == [3]
    assert len(m.prefix_cache) == 4  # the hits once, the new full block


@pytest.mark.parametrize("writer", ["parent", "child"])
def test_after_a_fork_a_one_token_append_copies_the_shared_last_block(writer):
    m = KVCacheManager(8, 4)
    m.add_sequence("parent", [1, 2])  # one partly filled block: room for two more tokens
    m.fork("parent", "child")
    [shared] = m.block_table(writer)
    m.append_tokens(writer, [3])
    [copy] = m.block_table(writer)
    assert copy != shared and m.pop_block_copies() == [(shared, copy)]
    other = "child" if writer == "parent" else "parent"
    assert m.block_table(other) == [shared] and m.pool.ref_count(shared) == 1


# Random operation sequences keep every invariant of DESIGN.md (hypothesis stateful tests).


class ManagerMachine(RuleBasedStateMachine):
    """The manager with prefix caching and forks, against a model of what each block holds.

    Prompts are drawn from a few shared stems and two salts, so prefixes really are shared.
    The model records, for every full block a sequence wrote, the salt and every token up to
    the block's end: a prefix hit must hand out a block holding exactly that.
    """

    def __init__(self):
        super().__init__()
        self.manager = KVCacheManager(
            16, 4, blocks_per_page=4, allocation="pack_pages", eviction="lfu"
        )
        self.tokens: dict[int, list[int]] = {}
        self.salt: dict[int, str] = {}
        self.holds: dict[int, tuple] = {}  # block -> (salt, tokens up to its end) when full
        self.next_id = 0

    @rule(stem=st.integers(0, 2), length=st.integers(1, 22), salt=st.sampled_from(["a", "b"]))
    def add(self, stem, length, salt):
        seq, prompt = self.next_id, [stem * 100 + t for t in range(length)]
        self.next_id += 1
        snap = self.manager.snapshot()
        try:
            table = self.manager.add_sequence(seq, prompt, salt=salt)
        except OutOfBlocks:
            assert self.manager.snapshot() == snap and seq not in self.manager
            return
        hit_tokens = self.manager.num_cached_tokens(seq)
        assert hit_tokens % 4 == 0 and hit_tokens <= length - 1  # never the last token
        for i in range(hit_tokens // 4):  # a hit holds exactly this prefix, for this salt
            assert self.holds.get(table[i]) == (salt, tuple(prompt[: (i + 1) * 4]))
        assert len(table) == blocks_needed(length, 4)
        self.tokens[seq], self.salt[seq] = prompt, salt
        self.written(seq)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), n=st.integers(1, 6))
    def append(self, data, n):
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        snap, fits = self.manager.snapshot(), self.manager.can_append(seq, n)
        try:
            self.manager.append_tokens(seq, [7] * n)
        except OutOfBlocks:
            assert not fits and self.manager.snapshot() == snap
            return
        assert fits
        for _src, dst in self.manager.pop_block_copies():  # copy-on-write: the copy holds it too
            assert self.manager.pool.ref_count(dst) == 1
        self.tokens[seq] += [7] * n
        self.written(seq)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(sorted(self.tokens)))
        child = self.next_id
        self.next_id += 1
        assert self.manager.fork(parent, child) == self.manager.block_table(parent)
        self.tokens[child], self.salt[child] = list(self.tokens[parent]), self.salt[parent]

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def free(self, data):
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        self.manager.free_sequence(seq)
        del self.tokens[seq], self.salt[seq]

    def written(self, seq):
        """Record what the full blocks of `seq` hold now."""
        toks, table = self.tokens[seq], self.manager.block_table(seq)
        for i in range(len(toks) // 4):
            self.holds[table[i]] = (self.salt[seq], tuple(toks[: (i + 1) * 4]))

    @invariant()
    def ref_counts_equal_block_table_references(self):
        refs = Counter()
        for seq in self.tokens:
            refs.update(self.manager.block_table(seq))
        snap = self.manager.snapshot()
        for block in snap.blocks:
            assert block.ref_count == refs[block.block_id]
            assert (block.state is BlockState.IN_USE) == (block.ref_count > 0)
            assert (block.block_id in self.manager.pool.policy) == (
                block.state is BlockState.CACHED
            )  # no in-use block is ever an eviction candidate

    @invariant()
    def sharers_agree_on_what_a_block_holds(self):
        seen: dict[int, tuple] = {}
        for seq, toks in self.tokens.items():
            for i, block in enumerate(self.manager.block_table(seq)):
                held = (self.salt[seq], tuple(toks[i * 4 : (i + 1) * 4]), i)
                assert seen.setdefault(block, held) == held

    @invariant()
    def tables_slots_and_stats_agree(self):
        stats = self.manager.stats()
        assert (
            stats.num_free_blocks + stats.num_in_use_blocks + stats.num_cached_blocks
            == stats.num_blocks
        )
        assert stats.num_tokens == sum(len(t) for t in self.tokens.values())
        assert stats.num_sequences == len(self.tokens)
        assert stats.blocks_saved_by_sharing >= 0
        for seq, toks in self.tokens.items():
            table = self.manager.block_table(seq)
            assert len(table) == blocks_needed(len(toks), 4)
            assert self.manager.token_ids(seq) == toks
            slots = self.manager.slot_mapping(seq)
            assert [s // 4 for s in slots[::4]] == table


TestManager = ManagerMachine.TestCase


TestManager.settings = STEPS


# Prefix caching: chained hashes, sharing, salts, forks with copy-on-write, reset, metrics.


SHARED = list(range(100, 112))  # three full blocks of 4


def test_a_second_request_hits_exactly_the_shared_full_blocks():
    m = KVCacheManager(16, BS)
    first = m.add_sequence("a", [*SHARED, 1, 2])
    second = m.add_sequence("b", [*SHARED, 7, 8, 9])
    assert m.num_cached_tokens("a") == 0 and m.num_cached_tokens("b") == 12
    assert second[:3] == first[:3] and second[3] != first[3]
    assert [m.pool.ref_count(b) for b in first[:3]] == [2, 2, 2]
    assert m.stats().blocks_saved_by_sharing == 3


def test_a_full_prompt_hit_still_computes_the_last_token():
    m = KVCacheManager(16, BS)
    m.add_sequence("a", SHARED)
    m.free_sequence("a")
    table = m.add_sequence("b", SHARED)
    assert m.num_cached_tokens("b") == 8  # two blocks hit; the third holds the last token
    assert m.pool.state(table[2]) is BlockState.IN_USE


def test_freed_blocks_are_found_again_until_evicted():
    m = KVCacheManager(4, BS)
    m.add_sequence("a", [*SHARED[:8], 1])
    m.free_sequence("a")
    assert m.pool.num_cached == 2
    m.add_sequence("b", [*SHARED[:8], 5])
    assert m.num_cached_tokens("b") == 8
    m.free_sequence("b")
    m.add_sequence("c", list(range(200, 215)))  # needs all 4 blocks: evicts both cached
    m.free_sequence("c")
    m.add_sequence("d", [*SHARED[:8], 5])  # 1 free block + 2 of c's, now cached, evicted
    assert m.num_cached_tokens("d") == 0
    assert m.stats().evictions == 4


def test_asking_for_prefix_hits_changes_nothing_and_agrees_with_adding():
    m = KVCacheManager(8, BS, eviction="lfu")
    m.add_sequence("a", [*SHARED, 1])
    m.free_sequence("a")

    def state():
        return m.snapshot(), m.hit_rates(), [m.pool.policy.count(b) for b in range(8)]

    before = state()
    assert m.num_prefix_hit_tokens([*SHARED, 9]) == 12
    assert m.num_prefix_hit_tokens(SHARED) == 8  # never the last token
    assert m.num_prefix_hit_tokens([*SHARED, 9], salt="other") == 0
    assert state() == before
    m.add_sequence("b", [*SHARED, 9])
    assert m.num_cached_tokens("b") == 12


def test_salted_requests_never_share():
    m = KVCacheManager(16, BS)
    m.add_sequence("a", [*SHARED, 1], salt="tenant-1")
    m.add_sequence("b", [*SHARED, 1], salt="tenant-2")
    m.add_sequence("c", [*SHARED, 1], salt="tenant-1")
    assert m.num_cached_tokens("b") == 0 and m.num_cached_tokens("c") == 12
    assert not set(m.block_table("a")) & set(m.block_table("b"))


def test_generated_tokens_are_registered_for_multi_turn_chat():
    m = KVCacheManager(16, BS)
    m.add_sequence("turn1", [1, 2, 3])
    m.append_tokens("turn1", [4, 5, 6, 7, 8, 9])  # the answer fills blocks 0 and 1
    m.free_sequence("turn1")
    m.add_sequence("turn2", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])  # history + new question
    assert m.num_cached_tokens("turn2") == 8


def test_lfu_counts_hits_per_block():
    m = KVCacheManager(8, BS, eviction="lfu")
    for i in range(3):
        m.add_sequence(i, [*SHARED[:4], i])
    assert m.pool.policy.count(m.block_table(0)[0]) == 3  # first use + two hits


def test_fork_shares_everything_and_append_copies_the_shared_last_block():
    m = KVCacheManager(16, BS)
    parent = m.add_sequence("p", [1, 2, 3, 4, 5, 6])
    assert m.fork("p", "c") == parent
    assert [m.pool.ref_count(b) for b in parent] == [2, 2]
    m.append_tokens("c", [70])
    child = m.block_table("c")
    assert child[0] == parent[0] and child[1] != parent[1]
    assert m.pop_block_copies() == [(parent[1], child[1])]
    assert m.pop_block_copies() == []
    assert [m.pool.ref_count(b) for b in (parent[1], child[1])] == [1, 1]
    m.append_tokens("p", [60])  # the parent's last block is its own again: no copy
    assert m.pop_block_copies() == [] and m.block_table("p") == parent


def test_appending_after_a_fork_at_a_block_boundary_needs_no_copy():
    m = KVCacheManager(16, BS)
    m.add_sequence("p", [1, 2, 3, 4])
    m.fork("p", "c")
    m.append_tokens("c", [5])
    assert m.pop_block_copies() == [] and len(m.block_table("c")) == 2


def test_two_live_blocks_with_the_same_content_keep_the_first_registration():
    m = KVCacheManager(16, BS)
    m.add_sequence("a", SHARED[:4])  # a prompt of one full block: never a hit, computed
    m.add_sequence("b", SHARED[:4])  # computed again in its own block
    a, b = m.block_table("a")[0], m.block_table("b")[0]
    assert a != b and m.prefix_cache.hash_of(a) is not None and m.prefix_cache.hash_of(b) is None
    m.free_sequence("b")
    assert m.pool.state(b) is BlockState.FREE  # the duplicate is not cached


def test_reset_refuses_while_blocks_are_in_use():
    m = KVCacheManager(8, BS)
    m.add_sequence("a", [*SHARED, 1])
    with pytest.raises(CacheBusy, match="in use"):
        m.reset_prefix_cache()
    m.free_sequence("a")
    assert m.reset_prefix_cache() == 3
    m.add_sequence("b", [*SHARED, 1])
    assert m.num_cached_tokens("b") == 0 and len(m.prefix_cache) == 3


def test_prefix_caching_can_be_switched_off():
    m = KVCacheManager(8, BS, prefix_caching=False)
    m.add_sequence("a", [*SHARED, 1])
    m.add_sequence("b", [*SHARED, 1])
    assert m.num_cached_tokens("b") == 0 and m.prefix_cache is None
    m.free_sequence("a")
    assert m.pool.num_cached == 0


def prepared_with_shared_prefix():
    m = KVCacheManager(8, BS)
    m.add_sequence("a", [*SHARED, 1])
    return m


@pytest.mark.parametrize(
    ("action", "error"),
    [
        (lambda m: m.add_sequence("b", [1], salt=3), InvalidArgument),
        (lambda m: m.add_sequence("b", [1], salt=["x"]), InvalidArgument),
        (lambda m: m.add_sequence("b", [1, 2, 3, 4], extra_keys=(1.5,)), InvalidArgument),
        (lambda m: m.fork("zz", "b"), UnknownSequence),
        (lambda m: m.fork("a", "a"), DuplicateSequence),
        (lambda m: m.add_sequence("a", [1]), DuplicateSequence),
    ],
)
def test_bad_calls_change_nothing(action, error):
    m = prepared_with_shared_prefix()
    before = (m.snapshot(), m.stats(), m.hit_rates(), len(m.prefix_cache))
    with pytest.raises(error):
        action(m)
    assert (m.snapshot(), m.stats(), m.hit_rates(), len(m.prefix_cache)) == before


def test_appending_to_a_freed_sequence_is_refused():
    m = prepared_with_shared_prefix()
    m.free_sequence("a")
    with pytest.raises(UnknownSequence):
        m.append_tokens("a", [1])


PROMPT = list(range(9))  # two full blocks of 4, then the last token


@pytest.mark.parametrize("index", ["hash", "radix"])
def test_only_the_same_salt_and_extra_keys_share_blocks(index):
    m = KVCacheManager(64, 4, prefix_index=index)
    namespaces = [
        {"salt": "t1"},
        {"salt": "t2"},
        {"salt": b"t1"},  # bytes are not the str of the same letters
        {},
        {"extra_keys": ("lora-a",)},
        {"extra_keys": ("lora-b",)},
        {"salt": "t1", "extra_keys": ("lora-a",)},
    ]
    for i, namespace in enumerate(namespaces):
        m.add_sequence(("first", i), PROMPT, **namespace)
        assert m.num_cached_tokens(("first", i)) == 0, namespace  # nobody else's blocks
    for i, namespace in enumerate(namespaces):
        m.add_sequence(("again", i), PROMPT, **namespace)
        assert m.num_cached_tokens(("again", i)) == 8, namespace  # its own, every time
        assert m.block_table(("again", i))[:2] == m.block_table(("first", i))[:2]
    tables = {tuple(m.block_table(("first", i))[:2]) for i in range(len(namespaces))}
    assert len(tables) == len(namespaces)


@pytest.mark.parametrize("prefix_index", ["hash", "radix"])
def test_a_block_filled_by_one_decoded_token_is_offered_to_the_prefix_cache(prefix_index):
    """The one-token append that fills the last block leaves the fast path, which only serves
    a block it does not fill: the full block is indexed, and a later prompt hits it."""
    m = KVCacheManager(8, 4, prefix_index=prefix_index)
    m.add_sequence("a", [1, 2, 3])
    assert m.num_prefix_hit_tokens([1, 2, 3, 4, 5]) == 0
    m.append_tokens("a", [4])  # fills block 0
    assert m.num_prefix_hit_tokens([1, 2, 3, 4, 5]) == 4


def test_can_append_asks_about_one_token_by_default():
    m = KVCacheManager(2, 4)
    m.add_sequence("a", [1, 2, 3, 4, 5, 6, 7, 8])  # both blocks full, none free
    assert not m.can_append("a") and m.can_append("a", 0)
    m.free_sequence("a")
    m.add_sequence("b", [1, 2, 3])
    assert m.can_append("b") and not m.can_append("b", 6)


@pytest.mark.parametrize("prefix_index", ["hash", "radix"])
@pytest.mark.parametrize("stage", ["entry", "share_path"])
def test_a_fork_that_fails_halfway_changes_nothing(prefix_index, stage, monkeypatch):
    m = KVCacheManager(8, 4, prefix_index=prefix_index)
    m.add_sequence("a", [1, 2, 3, 4, 5])
    before = m.snapshot()

    def fail(*args, **kwargs):
        raise MemoryError("injected")

    if stage == "entry":
        monkeypatch.setattr(manager_module, "SequenceEntry", fail)
    else:
        monkeypatch.setattr(m.prefix_cache, "share_path", fail)
    with pytest.raises(MemoryError):
        m.fork("a", "b")
    monkeypatch.undo()
    assert m.snapshot() == before
    m.fork("a", "b")
    m.append_tokens("b", [9])
    m.free_sequence("b")
    m.free_sequence("a")
    assert m.pool.num_free + m.pool.num_cached == 8


# -- a fault in someone else's code, at every call site: all or nothing ---------------------
# The manager calls code it did not write: the eviction policy, and a learner's pool, block
# hasher and prefix lookup. Each part is wrapped so that every call into it is a *site*,
# counted; a fault-free run of one workload lists the sites it reaches, then each site's first
# few calls are made to raise, in turn (a KeyboardInterrupt or an Exception), and the manager
# must be as before the call, except that blocks the call evicted stay evicted, and the same
# call must then succeed. A site a later change adds is listed by the first run: none is missed.


class Sites:
    """Counts calls per site while `counting`; raises `armed = (site, n, error)` at the
    site's n-th call. With `then_failing` (a prefix of site names), every later call of such
    a site raises too, until `failing` is cleared: a part that keeps failing while the call
    is undone."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.armed: tuple[str, int, BaseException] | None = None
        self.counting = False
        self.then_failing: str | None = None
        self.failing: str | None = None

    def enter(self, site: str) -> None:
        if self.counting:
            self.calls[site] += 1
            if self.armed is not None and self.armed[:2] == (site, self.calls[site]):
                error, self.armed = self.armed[2], None
                self.failing = self.then_failing
                raise error
            if self.failing is not None and site.startswith(self.failing):
                raise InjectedInterrupt(f"{site}, again")

    def wrap(self, site: str, call):
        def recorded(*args, **kwargs):
            self.enter(site)
            return call(*args, **kwargs)

        return recorded

    @contextlib.contextmanager
    def active(self):
        self.counting = True
        try:
            yield
        finally:
            self.counting = False


class RecordedPolicy(EvictionPolicy):
    """An `EvictionPolicy` (someone's) whose every call is a site; LRU inside."""

    def __init__(self, sites: Sites) -> None:
        self.inner, self.sites, self.name = LRU(), sites, "recorded lru"

    def touch(self, block_id):
        self.sites.enter("policy.touch")
        self.inner.touch(block_id)

    def make_evictable(self, block_id):
        self.sites.enter("policy.make_evictable")
        self.inner.make_evictable(block_id)

    def revive(self, block_id):
        self.sites.enter("policy.revive")
        self.inner.revive(block_id)

    def evict(self):
        self.sites.enter("policy.evict")
        return self.inner.evict()

    def forget(self, block_id):
        self.sites.enter("policy.forget")
        self.inner.forget(block_id)

    def __len__(self):
        self.sites.enter("policy.__len__")
        return len(self.inner)

    def __contains__(self, block_id):
        self.sites.enter("policy.__contains__")
        return block_id in self.inner


class RecordedPool:
    """A learner's ref-counted pool (chapter 01's design) whose every call is a site."""

    def __init__(self, sites: Sites, num_blocks: int, block_size: int) -> None:
        from test_caching_pool import StackPool

        self.inner, self.sites = StackPool(num_blocks, block_size), sites
        self.num_blocks, self.block_size = num_blocks, block_size
        for name in ("allocate", "share", "release", "ref_count"):
            setattr(self, name, sites.wrap(f"pool.{name}", getattr(self.inner, name)))

    @property
    def num_free(self):
        self.sites.enter("pool.num_free")
        return self.inner.num_free


def _recorded_manager(kind: str, sites: Sites) -> KVCacheManager:
    from test_learner_manager import my_hashes, my_lookup

    from paged_kv.course.learner_manager import learner_manager

    policy = RecordedPolicy(sites)
    if kind == "learner":
        return learner_manager(
            14,
            4,
            eviction=policy,
            pool=lambda n, size: RecordedPool(sites, n, size),
            block_hasher=sites.wrap("block_hasher", my_hashes),
            prefix_lookup=sites.wrap("prefix_lookup", my_lookup),
        )
    return KVCacheManager(14, 4, eviction=policy, prefix_index=kind)


STEM = list(range(100, 112))
FAULT_WORKLOAD: list[tuple[str, tuple]] = [  # 14 blocks of 4: evictions from the 8th call
    ("add", ("a", [*STEM, 1, 2])),
    ("add", ("b", [*STEM, 3])),  # three hits
    ("append", ("a", [5])),
    ("append", ("a", [6, 7, 8])),  # a block fills: registered
    ("fork", ("a", "c")),
    ("append", ("c", [9])),  # copy-on-write of the shared last block
    ("free", ("b",)),
    ("add", ("d", list(range(200, 222)))),  # evicts
    ("append", ("d", [1, 2, 3, 4, 5])),
    ("free", ("a",)),
    ("free", ("c",)),
    ("discard", ("a-blocks",)),
    ("add", ("e", [*STEM, *range(300, 314)])),  # hits, then evicts several
    ("append", ("e", [4])),
    ("free", ("d",)),
    ("free", ("e",)),
    ("reset", ()),
]


def _run_op(m: KVCacheManager, op: str, args: tuple, tables: dict) -> None:
    if op == "add":
        m.add_sequence(*args)
    elif op == "append":
        m.append_tokens(*args)
    elif op == "fork":
        m.fork(*args)
    elif op == "free":
        tables[args[0]] = m.block_table(args[0])
        m.free_sequence(*args)
    elif op == "discard":
        m.discard_unwritten(tables["a"][:2:-1])  # as if a's last step had failed
    else:
        m.reset_prefix_cache()


def _manager_view(m: KVCacheManager) -> dict[str, Any]:
    """Everything the manager, its pool, index and policy hold, by block (not the policy's
    order of candidates: a policy has no undo for a touch)."""
    index, blocks = m.prefix_cache, range(m.pool.num_blocks)
    view: dict[str, Any] = {
        "blocks": {b.block_id: b for b in m.snapshot().blocks},
        "tables": dict(m.snapshot().block_tables),
        "tokens": {s: m.token_ids(s) for s in m.sequence_ids},
        "cached tokens": {s: m.num_cached_tokens(s) for s in m.sequence_ids},
        "candidates": {b for b in blocks if b in m.pool.policy},
        "indexed": {b: index.content_key(b) for b in blocks} if index else {},
        "copies": list(m._copies),
        "hits": m.hit_rates(),
        "stats": m.stats(),
    }
    if isinstance(index, RadixCache):
        view["locks"] = {b: index.lock_of(b) for b in blocks}
        view["matches"] = {
            s: index.match(m._seqs[s].seq, 99) for s in m.sequence_ids
        }  # what a lookup finds
    return view


def _check_rolled_back(before: dict[str, Any], after: dict[str, Any]) -> None:
    """`after` is `before`, except blocks that were cached and are free now: evicted by the
    failed call (their content is gone: no undo), each counted as an eviction. (Without
    "candidates" in the views: the policy failed while it was undone, so the pool tells it
    its candidates on its next call.)"""
    evicted = {
        b
        for b, info in before["blocks"].items()
        if info.state is BlockState.CACHED and after["blocks"][b].state is BlockState.FREE
    }
    assert after["stats"].evictions - before["stats"].evictions == len(evicted)
    for key in before:
        old, new = before[key], after[key]
        if key == "stats":
            old = replace(
                old,
                num_free_blocks=old.num_free_blocks + len(evicted),
                num_cached_blocks=old.num_cached_blocks - len(evicted),
                evictions=old.evictions + len(evicted),
            )
        elif key in ("blocks", "indexed", "locks"):
            old = {b: v for b, v in old.items() if b not in evicted}
            new = {b: v for b, v in new.items() if b not in evicted}
        elif key == "candidates":
            old = old - evicted
        assert new == old, key
    for b in evicted:
        assert after["blocks"][b].ref_count == 0 and not after["indexed"].get(b)


def _faulted_run(
    kind: str, armed: tuple[str, int, BaseException] | None, then_failing: str | None = None
) -> Sites:
    """The workload on a fresh manager with `armed` (None: no fault), and then every call of
    the sites `then_failing` names failing too until the call is over; each call that fails
    is checked as rolled back, then made again (it must succeed), and every sequence's tokens
    follow the workload."""
    sites = Sites()
    m = _recorded_manager(kind, sites)
    sites.armed, sites.then_failing = armed, then_failing
    tables: dict[str, list[int]] = {}
    for op, args in FAULT_WORKLOAD:
        before = _manager_view(m)
        try:
            with sites.active():
                _run_op(m, op, args, tables)
        except BaseException as error:
            assert armed is not None and error is armed[2], error
            after = _manager_view(m)
            if then_failing:
                del before["candidates"], after["candidates"]
            _check_rolled_back(before, after)
            sites.failing = None
            with sites.active():
                _run_op(m, op, args, tables)  # the next call is correct
        refs: Counter[int] = Counter()
        for seq in m.sequence_ids:
            refs.update(m.block_table(seq))
        for info in m.snapshot().blocks:  # no block held by nobody, none counted twice
            assert info.ref_count == refs[info.block_id]
            assert (info.block_id in m.pool.policy) == (info.state is BlockState.CACHED)
    assert m.pool.num_free == m.pool.num_blocks  # everything came back (the workload resets)
    return sites


class InjectedInterrupt(KeyboardInterrupt):
    """A Ctrl-C landing in someone's code (a subclass, so that no real one is mistaken)."""


class InjectedError(RuntimeError):
    """An exception from someone's code."""


FAULT_KINDS = ["hash", "radix", "learner"]
_SITES = {kind: _faulted_run(kind, None).calls for kind in FAULT_KINDS}


def test_the_fault_workload_reaches_every_part_and_evicts():
    for kind, calls in _SITES.items():
        assert calls["policy.evict"] >= 3 and calls["policy.revive"] >= 1, kind
        assert {"policy.touch", "policy.make_evictable", "policy.forget"} <= set(calls), kind
    learner = _SITES["learner"]
    assert {f"pool.{name}" for name in ("allocate", "share", "release", "ref_count")} <= set(
        learner
    )
    assert learner["block_hasher"] and learner["prefix_lookup"]


@pytest.mark.parametrize(
    ("kind", "site", "n"),
    [
        (kind, site, n)
        for kind in FAULT_KINDS
        for site in sorted(_SITES[kind])
        for n in range(1, min(_SITES[kind][site], 3) + 1)
    ],
)
def test_a_fault_at_any_call_into_someone_elses_code_is_rolled_back(kind, site, n):
    error = InjectedInterrupt(site) if n % 2 else InjectedError(site)
    sites = _faulted_run(kind, (site, n, error))
    assert sites.armed is None  # it fired


@pytest.mark.parametrize(
    ("kind", "site"), [(kind, site) for kind in FAULT_KINDS for site in sorted(_SITES[kind])]
)
def test_a_policy_failing_again_while_the_call_is_undone_changes_nothing_it_may_not(kind, site):
    """A fault anywhere, then every policy call of the undo fails too (`KeyboardInterrupt`):
    the first error goes on, blocks, tables, index and counts are as before, and the next call
    works, the pool having told the policy its candidates again (the run checks them)."""
    error = InjectedInterrupt(site)
    sites = _faulted_run(kind, (site, 1, error), then_failing="policy.")
    assert sites.armed is None  # it fired


class Flaky(LRU):
    """An LRU that, `armed`, raises `InjectedInterrupt` at its first `touch` and at every
    call after it."""

    failing = armed = False

    def _enter(self, site):
        if Flaky.failing:
            raise InjectedInterrupt(f"{site}, again")
        if Flaky.armed and site == "touch":
            Flaky.failing = True
            raise InjectedInterrupt(site)

    def touch(self, block_id):
        self._enter("touch")
        super().touch(block_id)

    def make_evictable(self, block_id):
        self._enter("make_evictable")
        super().make_evictable(block_id)

    def revive(self, block_id):
        self._enter("revive")
        super().revive(block_id)


def test_a_prefix_hit_whose_touch_and_undo_fail_leaks_no_block():
    """The red team's case: a hit's `touch` raises, then `make_evictable` while the hit is
    undone. The first error goes on, the hit block is cached again, and once the policy
    works a sequence as large as the pool fits (before, the block stayed in use, owned by
    nobody: `OutOfBlocks`)."""
    m = KVCacheManager(4, 2, eviction=Flaky)
    m.add_sequence("a", [1, 2, 3, 4, 5])
    m.free_sequence("a")  # two blocks cached
    before = m.snapshot()
    Flaky.armed = True
    with pytest.raises(InjectedInterrupt) as raised:
        m.add_sequence("b", [1, 2, 9])
    Flaky.armed = Flaky.failing = False
    assert str(raised.value) == "touch" and m.snapshot() == before
    assert (m.stats().num_cached_blocks, m.stats().num_in_use_blocks) == (2, 0)
    assert len(m.add_sequence("c", range(100, 108))) == 4


def test_an_evict_naming_a_block_in_use_is_refused_and_books_no_block_twice():
    """The red team's case: `evict()` names block 1, which sequence 'a' holds. Before, 'c'
    got [1, 1] and block 1 sat twice in the free list; now `InvalidBlock`, no eviction
    counted, nothing changed, and with the policy fixed 'c' gets blocks of its own."""

    class Bad(LRU):
        armed = True

        def evict(self):
            return 1 if Bad.armed else super().evict()

    m = KVCacheManager(num_blocks=4, block_size=2, eviction=Bad)
    m.add_sequence("a", [1, 2, 3, 4])
    m.add_sequence("b", [5, 6, 7, 8])
    m.free_sequence("b")
    before = (m.snapshot(), m.stats())
    with pytest.raises(InvalidBlock, match=r"'lru' \(Bad\) evict\(\) returned 1: block 1"):
        m.add_sequence("c", [9, 10, 11])
    assert (m.snapshot(), m.stats()) == before and m.stats().evictions == 0
    Bad.armed = False
    assert sorted(m.add_sequence("c", [9, 10, 11])) == [2, 3]
    assert m.block_table("a") == [0, 1] and m.stats().evictions == 2


def test_stats_count_cached_blocks_whatever_the_policys_len_says():
    """A policy whose `len` lies: stats and `can_allocate` are those of an honest LRU."""

    class Liar(LRU):
        def __len__(self):
            return 10**9

    managers = [KVCacheManager(8, 2, eviction=policy) for policy in (Liar, LRU)]
    for m in managers:
        m.add_sequence("a", range(7))
        m.add_sequence("b", range(20, 23))
        m.free_sequence("a")
    liar, honest = managers
    assert liar.stats() == honest.stats()
    assert (liar.stats().num_cached_blocks, liar.stats().num_in_use_blocks) == (3, 2)
    assert [liar.can_allocate(n) for n in (12, 13)] == [True, False]
