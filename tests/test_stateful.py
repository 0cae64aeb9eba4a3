"""Random operation sequences keep every invariant of DESIGN.md (hypothesis stateful tests).

Each machine runs 250 examples of up to 50 steps: over 10⁴ steps per machine per run
(measured: about 12,000 each).
"""

from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from paged_kv import BlockPool, BlockState, KVCacheManager, OutOfBlocks
from paged_kv.block_table import blocks_needed
from paged_kv.eviction import POLICIES

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


class ManagerMachine(RuleBasedStateMachine):
    """The manager against a model: tokens per sequence."""

    def __init__(self):
        super().__init__()
        self.manager = KVCacheManager(24, 4, blocks_per_page=4, allocation="pack_pages")
        self.tokens: dict[int, list[int]] = {}
        self.next_id = 0

    @rule(length=st.integers(1, 30))
    def add(self, length):
        seq, prompt = self.next_id, list(range(length))
        self.next_id += 1
        if blocks_needed(length, 4) > self.manager.pool.num_free:
            assert not self.manager.can_allocate(length)
            snap = self.manager.snapshot()
            try:
                self.manager.add_sequence(seq, prompt)
            except OutOfBlocks:
                assert self.manager.snapshot() == snap and seq not in self.manager
                return
            raise AssertionError("add beyond capacity succeeded")
        assert self.manager.can_allocate(length)
        table = self.manager.add_sequence(seq, prompt)
        assert len(table) == blocks_needed(length, 4)
        self.tokens[seq] = prompt

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), n=st.integers(1, 9))
    def append(self, data, n):
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        new = [7] * n
        table_before = self.manager.block_table(seq)
        fits = self.manager.can_append(seq, n)
        try:
            added = self.manager.append_tokens(seq, new)
        except OutOfBlocks:
            assert not fits and self.manager.block_table(seq) == table_before
            assert self.manager.num_tokens(seq) == len(self.tokens[seq])
            return
        assert fits
        self.tokens[seq] += new
        assert self.manager.block_table(seq) == table_before + added
        # A new block only when the last one was full.
        assert len(added) == blocks_needed(len(self.tokens[seq]), 4) - len(table_before)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def free(self, data):
        seq = data.draw(st.sampled_from(sorted(self.tokens)))
        self.manager.free_sequence(seq)
        del self.tokens[seq]
        assert seq not in self.manager

    @invariant()
    def ref_counts_equal_block_table_references(self):
        refs = Counter()
        for seq in self.tokens:
            refs.update(self.manager.block_table(seq))
        snap = self.manager.snapshot()
        for block in snap.blocks:
            assert block.ref_count == refs[block.block_id]
            assert (block.state is BlockState.FREE) == (block.ref_count == 0)

    @invariant()
    def tables_slots_and_stats_agree(self):
        stats = self.manager.stats()
        assert stats.num_free_blocks + stats.num_in_use_blocks == stats.num_blocks
        assert stats.num_tokens == sum(len(t) for t in self.tokens.values())
        assert stats.num_sequences == len(self.tokens)
        seen = set()
        for seq, toks in self.tokens.items():
            table = self.manager.block_table(seq)
            assert len(table) == blocks_needed(len(toks), 4)
            assert self.manager.token_ids(seq) == toks
            slots = self.manager.slot_mapping(seq)
            assert len(slots) == len(set(slots)) == len(toks)
            assert [s // 4 for s in slots[::4]] == table
            assert not seen & set(slots)  # no two sequences write the same slot
            seen |= set(slots)


TestPool = PoolMachine.TestCase
TestPool.settings = STEPS
TestManager = ManagerMachine.TestCase
TestManager.settings = STEPS
