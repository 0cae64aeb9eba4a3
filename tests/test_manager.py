import contextlib
from typing import Any, cast

import numpy as np
import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from paged_kv import (
    BlockState,
    DuplicateSequence,
    InvalidArgument,
    KVCacheManager,
    OutOfBlocks,
    PagedKVError,
    UnknownSequence,
)
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
