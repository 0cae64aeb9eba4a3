"""Random operation sequences keep every invariant of DESIGN.md (hypothesis stateful tests).

Each machine runs 250 examples of up to 50 steps: over 10⁴ steps per machine per run
(measured: about 12,000 each).
"""

from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from paged_kv import BlockPool, BlockState, KVCacheManager, OutOfBlocks
from paged_kv.cache.block_table import blocks_needed
from paged_kv.cache.eviction import POLICIES

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


TestPool = PoolMachine.TestCase
TestPool.settings = STEPS
TestManager = ManagerMachine.TestCase
TestManager.settings = STEPS
