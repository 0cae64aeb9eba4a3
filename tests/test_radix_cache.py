"""The radix-tree prefix index: the same hits and blocks as the hash chain, and its invariants.

Differential: random adds, forks and frees on two managers, one per index, must give the same
block tables and hits at every step (LRU, FIFO and LFU, under eviction pressure). Stateful:
with appends too (so duplicates and growing leaves happen), every cached block is reachable in
the tree, every lock equals the pool's reference counts of its node's blocks, only unreferenced
leaves are ever evicted, a hit holds exactly the tokens (and salt) asked for, and a salt has a
root exactly while one of its blocks is indexed (memory stays flat over many tenants).
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from paged_kv import BlockState, InvalidArgument, InvalidBlock, KVCacheManager, OutOfBlocks
from paged_kv.cache.eviction import LRU, POLICIES
from paged_kv.cache.hashing import namespace_key
from paged_kv.cache.prefix_cache import PrefixCache
from paged_kv.cache.radix_cache import LeafFirst, RadixCache, blocks_on_path
from paged_kv.cache.sequence import TokenSequence

BS = 4


def prompt(stem: int, length: int) -> list[int]:
    """Prompts from a few stems share prefixes; a stem's tokens are distinct per position."""
    return [stem * 100 + t for t in range(length)]


OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"), st.integers(0, 2), st.integers(1, 26), st.sampled_from(["", "x"])
        ),
        st.tuples(st.just("fork"), st.integers(0, 30)),
        st.tuples(st.just("free"), st.integers(0, 30)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(OPS, st.sampled_from(["lru", "fifo", "lfu"]), st.integers(6, 20))
def test_radix_and_hash_chain_give_the_same_hits_and_blocks(ops, eviction, num_blocks):
    managers = [KVCacheManager(num_blocks, BS, eviction=eviction, prefix_index=i) for i in
                ("hash", "radix")]  # fmt: skip
    live: list[int] = []
    next_id = 0
    for op in ops:
        if op[0] == "add":
            _, stem, length, salt = op
            results = []
            for m in managers:
                try:
                    table = m.add_sequence(next_id, prompt(stem, length), salt=salt or None)
                    results.append((table, m.num_cached_tokens(next_id)))
                except OutOfBlocks:
                    results.append("full")
            assert results[0] == results[1]
            if results[0] != "full":
                live.append(next_id)
            next_id += 1
        elif live:
            seq = live[op[1] % len(live)]
            if op[0] == "fork":
                assert managers[0].fork(seq, next_id) == managers[1].fork(seq, next_id)
                live.append(next_id)
                next_id += 1
            else:
                for m in managers:
                    m.free_sequence(seq)
                live.remove(seq)
        assert managers[0].stats() == managers[1].stats()
        assert managers[0].pool.snapshot() == managers[1].pool.snapshot()
    assert managers[1].pool.policy.deferred == 0  # these policies name leaves by themselves


def test_hits_split_a_node_where_prompts_diverge():
    m = KVCacheManager(32, BS, prefix_index="radix")
    m.add_sequence("a", prompt(1, 17))  # four full blocks in one edge
    m.free_sequence("a")
    m.add_sequence("b", [*prompt(1, 8), 7, 7, 7, 7, 7])  # shares two blocks, then diverges
    assert m.num_cached_tokens("b") == 8
    tree = m.prefix_cache
    edges = [(depth, len(node.blocks), node.lock) for depth, node in tree.nodes()]
    assert edges == [(1, 2, 1), (2, 2, 0), (2, 1, 1)]  # split after 2 blocks; b's own child


def test_block_size_one_matches_token_by_token():
    for index in ("hash", "radix"):
        m = KVCacheManager(64, 1, prefix_index=index)
        m.add_sequence("a", [5, 6, 7, 8, 9])
        m.add_sequence("b", [5, 6, 7, 1, 2])
        m.add_sequence("c", [5, 6, 7, 8, 9])
        assert (m.num_cached_tokens("b"), m.num_cached_tokens("c")) == (3, 4)
    # [5 6 7] with children [8 9] (a) and [1 2] (b); c's hits end after 8: split there
    assert [n.tokens for _, n in m.prefix_cache.nodes()] == [[5, 6, 7], [8], [9], [1, 2]]


@pytest.mark.parametrize("index", ["hash", "radix"])
def test_salts_and_extra_keys_isolate_tenants(index):
    m = KVCacheManager(64, BS, prefix_index=index)
    shared = prompt(3, 13)
    m.add_sequence("alice-1", shared, salt="alice")
    m.add_sequence("bob-1", shared, salt="bob")
    m.add_sequence("alice-bytes", shared, salt=b"alice")  # bytes and str salts differ
    m.add_sequence("lora-a", shared, extra_keys=("adapter-a",))
    m.add_sequence("lora-b", shared, extra_keys=("adapter-b",))
    m.add_sequence("alice-2", shared, salt="alice")
    m.add_sequence("lora-a-2", shared, extra_keys=("adapter-a",))
    hits = {s: m.num_cached_tokens(s) for s in m.sequence_ids}
    assert hits == {"alice-1": 0, "bob-1": 0, "alice-bytes": 0, "lora-a": 0, "lora-b": 0,
                    "alice-2": 12, "lora-a-2": 12}  # fmt: skip
    tables = {s: set(m.block_table(s)) for s in ("alice-1", "bob-1", "alice-bytes", "lora-a")}
    assert not set.intersection(*tables.values())


def test_pricing_a_request_changes_nothing():
    m = KVCacheManager(16, BS, prefix_index="radix", eviction="s3fifo")
    m.add_sequence("a", prompt(1, 13))
    m.free_sequence("a")
    before = m.prefix_cache.format_tree(), m.pool.snapshot(), m.pool.policy.queues()
    assert m.num_prefix_hit_tokens(prompt(1, 6)) == 4  # inside the edge: no split to price it
    assert (m.prefix_cache.format_tree(), m.pool.snapshot(), m.pool.policy.queues()) == before


class NewestFirst(LRU):
    """A policy that names the most recently released block: the root of a fresh prompt."""

    name = "mru"

    def evict(self):
        return self._order.popitem(last=True)[0]


def test_leaf_first_puts_back_a_block_that_still_has_a_successor():
    m = KVCacheManager(4, BS, prefix_index="radix", eviction=NewestFirst())
    m.add_sequence("a", prompt(1, 13))  # blocks 0..3; 0..2 full and cached after the free
    m.free_sequence("a")  # released last block first: block 0 is the most recent
    evicted = []
    forget = m.prefix_cache.forget
    m.pool.on_evict = lambda b: (evicted.append((b, m.prefix_cache.is_leaf(b))), forget(b))
    m.add_sequence("b", prompt(2, 9))  # needs 3 blocks: 1 free + 2 evicted
    assert evicted == [(2, True), (1, True)] and m.pool.policy.deferred > 0
    assert m.num_prefix_hit_tokens(prompt(1, 13)) == 4  # what is left is still reachable


def test_an_unknown_prefix_index_name_is_refused():
    with pytest.raises(InvalidArgument, match="prefix_index"):
        KVCacheManager(8, BS, prefix_index="trie")


class RadixMachine(RuleBasedStateMachine):
    """The radix manager under adds, appends, forks and frees, every policy, three salts."""

    def __init__(self):
        super().__init__()
        self.manager = None
        self.tokens: dict[int, list[int]] = {}
        self.salt: dict[int, str] = {}
        self.holds: dict[int, tuple] = {}  # block -> (salt, tokens up to its end) when full
        self.next_id = 0

    @precondition(lambda self: self.manager is None)
    @rule(eviction=st.sampled_from(sorted(POLICIES)), num_blocks=st.integers(8, 24))
    def create(self, eviction, num_blocks):
        self.manager = KVCacheManager(num_blocks, BS, eviction=eviction, prefix_index="radix")
        index, pool = self.manager.prefix_cache, self.manager.pool
        forget = index.forget

        def checked_forget(block):  # the pool evicts: only unreferenced leaves may go
            assert pool.ref_count(block) == 0 and index.is_leaf(block)
            forget(block)

        pool.on_evict = checked_forget

    @precondition(lambda self: self.manager is not None)
    @rule(stem=st.integers(0, 2), length=st.integers(1, 22), salt=st.sampled_from("abc"))
    def add(self, stem, length, salt):
        seq, tokens = self.next_id, prompt(stem, length)
        self.next_id += 1
        snap = self.manager.snapshot()
        priced = self.manager.num_prefix_hit_tokens(tokens, salt=salt)
        try:
            table = self.manager.add_sequence(seq, tokens, salt=salt)
        except OutOfBlocks:
            assert self.manager.snapshot() == snap and seq not in self.manager
            return
        hits = self.manager.num_cached_tokens(seq)
        assert hits == priced and hits % BS == 0 and hits <= length - 1
        for i in range(hits // BS):  # a hit holds exactly this prefix, for this salt
            assert self.holds.get(table[i]) == (salt, tuple(tokens[: (i + 1) * BS]))
        self.tokens[seq], self.salt[seq] = tokens, salt
        self.written(seq)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), n=st.integers(1, 6), token=st.sampled_from([7, 8]))
    def append(self, data, n, token):
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        snap = self.manager.snapshot()
        try:
            self.manager.append_tokens(seq, [token] * n)
        except OutOfBlocks:
            assert self.manager.snapshot() == snap
            return
        self.manager.pop_block_copies()
        self.tokens[seq] += [token] * n
        self.written(seq)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(sorted(self.tokens)))
        child = self.next_id
        self.next_id += 1
        self.manager.fork(parent, child)
        self.tokens[child], self.salt[child] = list(self.tokens[parent]), self.salt[parent]

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def free(self, data):
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        self.manager.free_sequence(seq)
        del self.tokens[seq], self.salt[seq]

    @precondition(lambda self: self.manager is not None and not self.tokens)
    @rule()
    def reset(self):
        self.manager.reset_prefix_cache()
        assert len(self.manager.prefix_cache) == 0

    def written(self, seq):
        toks, table = self.tokens[seq], self.manager.block_table(seq)
        for i in range(len(toks) // BS):
            self.holds[table[i]] = (self.salt[seq], tuple(toks[: (i + 1) * BS]))

    @invariant()
    def the_tree_is_well_formed_and_every_cached_block_reachable(self):
        if self.manager is None:
            return
        index: RadixCache = self.manager.prefix_cache
        pool = self.manager.pool
        reachable = {}
        for root in index._roots.values():
            stack = [root]
            while stack:
                node = stack.pop()
                for key, child in node.children.items():
                    assert child.parent is node and child.blocks
                    assert len(child.tokens) == len(child.blocks) * BS
                    assert key == tuple(child.tokens[:BS])
                    stack.append(child)
                for block in node.blocks:
                    reachable[block] = node
        assert reachable == index._node_of  # everything indexed hangs in the tree, once
        for block in range(pool.num_blocks):
            state = pool.state(block)
            if state is BlockState.CACHED:
                assert block in reachable  # every cached block can be found again
            if block in reachable:
                assert state is not BlockState.FREE

    @invariant()
    def a_salt_has_a_root_exactly_while_one_of_its_blocks_is_indexed(self):
        if self.manager is None:
            return
        index: RadixCache = self.manager.prefix_cache
        salts = {self.holds[block][0] for block in index._node_of}
        assert set(index._roots) == {namespace_key(salt) for salt in salts}
        assert all(root.children for root in index._roots.values())

    @invariant()
    def locks_equal_the_references_of_the_paths(self):
        if self.manager is None:
            return
        index, pool = self.manager.prefix_cache, self.manager.pool
        for _, node in index.nodes():
            for block in node.blocks:
                assert node.lock == pool.ref_count(block)
        paths = Counter()
        for seq in self.tokens:
            entry = self.manager._seqs[seq]
            covered = blocks_on_path(entry.index_path)
            assert covered == entry.block_table[: len(covered)]  # a path is its table's head
            paths.update(covered)
        assert all(index.lock_of(b) == n for b, n in paths.items())
        if not self.tokens:
            assert all(node.lock == 0 for _, node in index.nodes())

    @invariant()
    def in_use_blocks_are_never_candidates(self):
        if self.manager is None:
            return
        pool = self.manager.pool
        assert isinstance(pool.policy, LeafFirst)
        for block in range(pool.num_blocks):
            assert (block in pool.policy) == (pool.state(block) is BlockState.CACHED)


TestRadixMachine = RadixMachine.TestCase
TestRadixMachine.settings = settings(max_examples=120, stateful_step_count=40, deadline=None)


def test_format_tree_draws_each_namespace_edge_blocks_and_locks():
    m = KVCacheManager(16, 2, prefix_index="radix")
    tree = m.prefix_cache
    assert isinstance(tree, RadixCache) and tree.format_tree() == "(empty)"
    m.add_sequence("a", list(range(1, 12)), salt="t")
    m.add_sequence("b", [1, 2, 3, 4, 9, 9, 9], salt="t")
    m.add_sequence("c", [5, 6, 7], extra_keys=(3,))
    assert tree.format_tree(max_tokens=4) == "\n".join(
        [
            "root (salt 't')",
            "└─ [1 2 3 4] (4 tokens) blocks [0, 1] lock 2",
            "   ├─ [5 6 7 8 …] (6 tokens) blocks [2, 3, 4] lock 1",
            "   └─ [9 9] (2 tokens) blocks [6] lock 1",
            "root (salt None, extra keys (3,))",
            "└─ [5 6] (2 tokens) blocks [8] lock 1",
        ]
    )


def test_hundreds_of_tenants_leave_roots_only_for_what_is_cached():
    m = KVCacheManager(16, BS, prefix_index="radix")
    tree = m.prefix_cache
    assert isinstance(tree, RadixCache)
    for i in range(300):  # a new salt each time; every prompt fills 2 blocks and starts a 3rd
        m.add_sequence(i, prompt(i % 3, 2 * BS + 1), salt=f"tenant {i}")
        m.free_sequence(i)
        assert len(tree._roots) <= m.pool.num_blocks // 2  # evicted tenants leave nothing
    cached = {tree._node_of[b] for b in tree._node_of}
    assert len(tree._roots) == len(cached) > 0  # one edge (of 1 or 2 blocks) per tenant
    m.reset_prefix_cache()
    assert tree._roots == {} and tree.format_tree() == "(empty)"


def test_leaf_first_with_nothing_evictable_raises_invalid_block():
    policy = LeafFirst(LRU(), RadixCache(4))
    with pytest.raises(InvalidBlock, match="no evictable block"):
        policy.evict()
    assert policy.deferred == 0 and len(policy) == 0


# Behaviours that mutation testing (tools/mutation_test.py) found no test pinning, in the cache
# layer: each test here kills at least one mutant that survived every other test of its module.


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


def test_a_blocks_content_key_is_its_prefix_however_the_tree_was_built():
    """The key chains the tokens up to the block's end and nothing after it, whether the block
    came in one register or grew a leaf in a second one."""
    tokens = list(range(4 * BLOCK))  # four blocks
    at_once, in_steps, other_end = RadixCache(BLOCK), RadixCache(BLOCK), RadixCache(BLOCK)
    _register(at_once, [tokens])
    _register(in_steps, [tokens[: 3 * BLOCK], tokens])
    _register(other_end, [tokens[: 3 * BLOCK] + [9] * BLOCK])
    keys = [at_once.content_key(b) for b in range(4)]
    assert [in_steps.content_key(b) for b in range(4)] == keys and None not in keys
    assert [other_end.content_key(b) for b in range(4)][:3] == keys[:3]
    assert other_end.content_key(3) != keys[3]
