"""The KV-cache manager: one block table per sequence, grown as tokens arrive, shared by prefix.

The engine talks to this class only. A new sequence reuses the cached blocks of the longest
prefix it shares with earlier ones, and gets fresh blocks for the rest; full blocks are
registered in the prefix cache as they fill; freed blocks stay cached until evicted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from copy import copy as shallow_copy
from typing import Any

from paged_kv.cache.block_pool import Allocation, BlockPool
from paged_kv.cache.block_table import (
    blocks_needed,
    copy_on_write,
    grow_block_table,
    last_block_is_shared_and_partial,
)
from paged_kv.cache.caching_pool import CachingPool
from paged_kv.cache.eviction import PolicySpec, make_policy
from paged_kv.cache.hashing import ExtraKey, Salt
from paged_kv.cache.hit_metrics import PrefixHitCounter
from paged_kv.cache.live_sequences import LiveSequences, SeqId, SequenceEntry
from paged_kv.cache.prefix_index import PrefixIndex, PrefixIndexName, make_prefix_index
from paged_kv.cache.sequence import TokenSequence
from paged_kv.cache.snapshot import BlockState
from paged_kv.errors import CacheBusy, DuplicateSequence, InvalidArgument, OutOfBlocks
from paged_kv.validation import MAX_TOKEN_ID, require_int, require_token_ids


class KVCacheManager(LiveSequences):
    """Block tables for many sequences over one `BlockPool`, with prefix caching.

    `add_sequence` reuses cached blocks of the longest matching prefix and allocates the
    rest, `append_tokens` adds a block only when the last one is full (copying a shared
    last block first), `fork` shares every block with a child, `free_sequence` releases
    them (full blocks stay cached). Every call is all or nothing, also when the eviction policy
    or a learner's part raises (any exception, `KeyboardInterrupt` included): what the call
    changed is undone, except that blocks it evicted stay evicted (their content is gone).

    One thread at a time: a manager is not guarded against concurrent calls (a lock would cost
    more than its one-token append); use it from one thread, as `Engine` does, which refuses a
    second thread with `EngineBusy`.

    A subclass may change how the pool is made (`_new_pool`), how a prompt's cached prefix is
    found (`_prefix_hits`), how a new table is allocated (`_new_table`) and how full blocks
    are indexed (`_index_full_blocks`); the course layer plugs a learner's parts in there.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int = 16,
        *,
        blocks_per_page: int | None = None,
        allocation: Allocation = "fifo",
        eviction: PolicySpec = "lru",
        prefix_caching: bool = True,
        hit_rate_window: int = 100,
        prefix_index: PrefixIndexName = "hash",
    ) -> None:
        self.prefix_cache: PrefixIndex[Any] | None = (
            make_prefix_index(prefix_index, block_size) if prefix_caching else None
        )
        index = self.prefix_cache
        if index is not None:  # its policy remembers content by the index's key
            eviction = index.guard_policy(make_policy(eviction, key_of=index.content_key))
        self.pool = self._new_pool(
            num_blocks,
            block_size,
            blocks_per_page=blocks_per_page,
            allocation=allocation,
            eviction=eviction,
            on_evict=index.forget if index is not None else None,
        )
        self.block_size = block_size
        self.hits = PrefixHitCounter(hit_rate_window)
        self._seqs: dict[SeqId, SequenceEntry] = {}
        self._num_tokens = 0
        self._table_blocks = 0
        self._copies: list[tuple[int, int]] = []

    # -- sequence lifecycle --------------------------------------------------------------

    def add_sequence(
        self,
        seq_id: SeqId,
        token_ids: Sequence[int] | TokenSequence,
        *,
        salt: Salt = None,
        extra_keys: Sequence[ExtraKey] = (),
        num_loaded_tokens: int = 0,
    ) -> list[int]:
        """Start `seq_id` with its prompt; return its block table.

        Full blocks already cached for the same salt, extra keys and preceding tokens are
        shared instead of allocated, except that the last prompt token is never a hit (its
        logits must be computed). `num_cached_tokens(seq_id)` says how many tokens hit.
        A `TokenSequence` is adopted, not copied: its hashes are reused and the manager
        appends to it while the sequence lives. Raises `OutOfBlocks` if the rest does not
        fit, changing nothing.

        `num_loaded_tokens` (whole blocks, right after the prefix hits, never the last token):
        tokens whose K/V the caller loads from a lower tier into the new blocks before
        computing; they count as cached tokens (chapter 07's tiered store).
        """
        if self._is_live(seq_id):
            raise DuplicateSequence(
                f"sequence {seq_id!r} already exists; free it first or pick a new id."
            )
        seq = self._sequence(token_ids, salt, extra_keys)
        length = len(seq.token_ids)
        if not length:
            raise InvalidArgument(f"sequence {seq_id!r} needs at least one prompt token.")
        hit_blocks = self._prefix_hits(seq)
        hits = len(hit_blocks)
        loaded = self._check_loaded(seq, hits, num_loaded_tokens)
        hit_tokens = hits * self.block_size
        table = self._new_table(seq_id, hit_blocks, length)
        cached_before, seq.num_cached_tokens = seq.num_cached_tokens, hit_tokens + loaded
        seq._live = True
        entry = SequenceEntry(seq, table, hits, len(table) * self.block_size)  # hits: indexed
        try:
            self._register_full_blocks(entry)
        except BaseException:  # all or nothing: the sequence goes back to its owner unadded
            seq.num_cached_tokens, seq._live = cached_before, False
            self.pool.release_unchecked(table[::-1], undoing=True)
            raise
        self._seqs[seq_id] = entry
        self._num_tokens += length
        self._table_blocks += len(table)
        self.hits.record(length, hit_tokens)
        return list(table)

    def append_tokens(self, seq_id: SeqId, token_ids: Sequence[int]) -> list[int]:
        """Add decoded tokens to `seq_id`; return the block ids appended to its table.

        If the last block is partly filled and shared (after a `fork`), it is first copied
        to a block of its own (copy-on-write); `pop_block_copies` hands those copies to the
        KV storage. Newly full blocks are registered for prefix caching.
        """
        try:
            entry = self._seqs[seq_id]
        except (KeyError, TypeError):
            entry = self._entry(seq_id)  # raises UnknownSequence
        held = entry.seq.token_ids
        if (
            type(token_ids) is list
            and len(token_ids) == 1
            and type(token_ids[0]) is int
            and 0 <= token_ids[0] <= MAX_TOKEN_ID
        ):
            tokens = token_ids
            if len(held) + 1 < entry.room:
                held += tokens  # the common decode step: a private last block it does not fill
                self._num_tokens += 1
                return []
        else:
            tokens = require_token_ids(token_ids, "the appended tokens")
            if not tokens:
                return []
        size, length = self.block_size, len(held)
        end = length + len(tokens)
        room, copies = entry.room, len(self._copies)
        new_blocks = self._grow_for_append(seq_id, entry, len(tokens)) if end > room else []
        held += tokens
        self._num_tokens += end - length
        if end // size > entry.num_registered:
            try:
                self._register_full_blocks(entry)
            except BaseException:  # all or nothing: the tokens and their blocks go again
                self._undo_append(entry, length, room, new_blocks, self._copies[copies:])
                raise
        return new_blocks

    def fork(self, parent_id: SeqId, child_id: SeqId) -> list[int]:
        """Start `child_id` as a copy of `parent_id` sharing all its blocks; return its table.

        For parallel sampling and beam search: no block is copied until one of them appends
        into the shared, partly filled last block.
        """
        parent = self._entry(parent_id)
        if self._is_live(child_id):
            raise DuplicateSequence(f"sequence {child_id!r} already exists; fork into a new id.")
        child_seq = parent.seq.copy()
        child_seq._live = True
        child = SequenceEntry(child_seq, list(parent.block_table), parent.num_registered, 0, True)
        self.pool.share_unchecked(parent.block_table)  # the first change: nothing above changes
        if self.prefix_cache is not None:
            try:
                child.index_path = self.prefix_cache.share_path(parent.index_path)
            except BaseException:
                self.pool.release_unchecked(child.block_table, undoing=True)  # all or nothing
                raise
        parent.forked, parent.room = True, 0
        self._seqs[child_id] = child
        self._num_tokens += len(child_seq)
        self._table_blocks += len(child.block_table)
        return list(child.block_table)

    def free_sequence(self, seq_id: SeqId) -> None:
        """Forget `seq_id` and release its blocks, last first; registered ones stay cached.

        An adopted `TokenSequence` goes back to its owner, who may append to it again."""
        entry = self._entry(seq_id)
        self.pool.release_unchecked(entry.block_table[::-1])  # all or nothing; then nothing fails
        if self.prefix_cache is not None:
            self.prefix_cache.release_path(entry.index_path)
        self._num_tokens -= len(entry.seq.token_ids)
        self._table_blocks -= len(entry.block_table)
        entry.seq._live = False
        del self._seqs[seq_id]

    def discard_unwritten(self, block_ids: Iterable[int]) -> None:
        """Blocks whose K/V a failed step never wrote, their sequences freed since: each one
        cached now leaves the prefix cache and becomes free, so no prefix hit can read it
        (one in use or free is left alone). Deepest first, for the radix tree's leaves."""
        pool = self.pool
        pool.discard([b for b in block_ids if pool.state(b) is BlockState.CACHED])

    def pop_block_copies(self) -> list[tuple[int, int]]:
        """(source, destination) block copies that copy-on-write asked for since the last call."""
        copies, self._copies = self._copies, []
        return copies

    def reset_prefix_cache(self) -> int:
        """Evict every cached block; only allowed when no block is in use. Returns how many."""
        if self.pool.num_in_use:
            raise CacheBusy(
                f"{self.pool.num_in_use} block(s) are in use by {len(self._seqs)} sequence(s); "
                "free them first: resetting would leave their blocks indexed by stale hashes."
            )
        return self.pool.evict_all_cached()

    # -- questions the scheduler asks ----------------------------------------------------

    def num_prefix_hit_tokens(
        self,
        token_ids: Sequence[int] | TokenSequence,
        *,
        salt: Salt = None,
        extra_keys: Sequence[ExtraKey] = (),
    ) -> int:
        """How many leading tokens of this prompt `add_sequence` would find cached now.

        Read-only: no block changes state and no hit is counted, so a scheduler can price
        a request (prompt tokens minus hits) before admitting it. Pass the request's
        `TokenSequence` so its block hashes are computed once, for pricing and admission.
        """
        return len(self._prefix_hits(self._sequence(token_ids, salt, extra_keys))) * (
            self.block_size
        )

    def can_allocate(self, num_tokens: int) -> bool:
        """Would a new sequence with a `num_tokens`-token prompt fit right now?"""
        require_int("num_tokens", num_tokens)
        return blocks_needed(num_tokens, self.block_size) <= self.pool.num_available

    def can_append(self, seq_id: SeqId, num_new_tokens: int = 1) -> bool:
        """Would appending `num_new_tokens` to `seq_id` fit right now?"""
        require_int("num_new_tokens", num_new_tokens)
        return (
            self._blocks_to_append(self._entry(seq_id), num_new_tokens) <= self.pool.num_available
        )

    # -- internals -----------------------------------------------------------------------

    def _is_live(self, seq_id: SeqId) -> bool:
        """Is `seq_id` live? A new id must be hashable: else `InvalidArgument`."""
        try:
            return seq_id in self._seqs
        except TypeError:
            raise InvalidArgument(
                f"sequence ids must be hashable (an int, a str, a tuple...), got "
                f"{type(seq_id).__name__}."
            ) from None

    def _sequence(
        self, token_ids: Sequence[int] | TokenSequence, salt: Salt, extra_keys: Sequence[ExtraKey]
    ) -> TokenSequence:
        """`token_ids` as a TokenSequence: adopted if it is one, else a new one."""
        if not isinstance(token_ids, TokenSequence):
            return TokenSequence(token_ids, salt=salt, extra_keys=extra_keys)
        if salt is not None or extra_keys:
            raise InvalidArgument(
                "a TokenSequence carries its own salt and extra keys; give them when making it."
            )
        if token_ids._live:
            raise InvalidArgument(
                "this TokenSequence is already live in a manager; fork it to share its blocks."
            )
        return token_ids

    def _check_loaded(self, seq: TokenSequence, hit_blocks: int, num_loaded_tokens: int) -> int:
        """`num_loaded_tokens` if it is whole blocks that end before the last prompt token."""
        loaded = require_int("num_loaded_tokens", num_loaded_tokens)
        room = ((len(seq.token_ids) - 1) // self.block_size - hit_blocks) * self.block_size
        if loaded % self.block_size or loaded > room:
            raise InvalidArgument(
                f"num_loaded_tokens={loaded}: loaded tokens must be whole blocks of "
                f"{self.block_size} after the {hit_blocks} prefix-hit block(s), and at most "
                f"{max(room, 0)} here (the last prompt token is always computed)."
            )
        return loaded

    def _grow_for_append(self, seq_id: SeqId, entry: SequenceEntry, num_new: int) -> list[int]:
        """Blocks for an append that needs some: copy a shared last block, then grow."""
        table, length = entry.block_table, len(entry.seq.token_ids)
        copy = None
        if entry.forked:  # the copy and the growth, or neither: check both first
            need = self._blocks_to_append(entry, num_new)
            if need > self.pool.num_available:
                raise _append_refused(seq_id, num_new, need, self.pool.num_available)
            copy = copy_on_write(self.pool, table, length)
            if copy is not None:
                self._copies.append(copy)
        try:
            new_blocks = grow_block_table(self.pool, table, length, num_new)
        except OutOfBlocks as refused:  # a private last block: growth alone, all or nothing
            raise _append_refused(seq_id, num_new, refused.requested, refused.available) from None
        except BaseException:  # someone's policy or pool failed: the copy goes too
            if copy is not None:
                self._undo_copy(table, copy)
            raise
        self._table_blocks += len(new_blocks)
        if not entry.forked:
            entry.room = len(table) * self.block_size
        return new_blocks

    def _blocks_to_append(self, entry: SequenceEntry, num_new_tokens: int) -> int:
        """New blocks an append needs: the growth, plus one for a copy-on-write copy."""
        length, table = len(entry.seq.token_ids), entry.block_table
        copy = last_block_is_shared_and_partial(self.pool, table, length)
        return blocks_needed(length + num_new_tokens, self.block_size) - len(table) + copy

    def _register_full_blocks(self, entry: SequenceEntry) -> None:
        """Index the full blocks that filled since the last call and keep their content; all
        or nothing (the prefix index is the library's: only the pool's calls can fail)."""
        full = len(entry.seq.token_ids) // self.block_size
        path = entry.index_path
        path_before = path if path is None else shallow_copy(path)  # the radix tree's
        kept = self._index_full_blocks(entry, full)
        if kept:
            try:
                self.pool.keep_content_unchecked(kept)  # newly indexed; hits, duplicates not
            except BaseException:
                index = self.prefix_cache
                assert index is not None  # something was indexed
                for block_id in reversed(kept):  # deepest first: the radix tree's leaves
                    index.forget(block_id)
                if path_before is None:
                    index.release_path(entry.index_path)
                entry.index_path = path_before
                raise
        entry.num_registered = full

    def _undo_append(
        self,
        entry: SequenceEntry,
        length: int,
        room: int,
        new_blocks: list[int],
        copies: list[tuple[int, int]],
    ) -> None:
        """Take back an append whose registration failed: its tokens (and any hash computed
        over them), the blocks it grew by and the copy-on-write it made."""
        seq, table = entry.seq, entry.block_table
        self._num_tokens -= len(seq.token_ids) - length
        del seq.token_ids[length:]
        if seq._chain is not None:  # hashes of blocks the tokens filled go with them
            del seq._hashes[length // seq._chain.block_size :]
        if new_blocks:
            del table[-len(new_blocks) :]
            self.pool.release_unchecked(new_blocks[::-1], undoing=True)
            self._table_blocks -= len(new_blocks)
        for made in copies:
            self._undo_copy(table, made)
        entry.room = room

    def _undo_copy(self, table: list[int], made: tuple[int, int]) -> None:
        """Give `table` its shared last block back instead of the private copy just made."""
        shared, private = made
        self.pool.share_unchecked([shared], undoing=True)
        table[-1] = shared
        self.pool.release_unchecked([private], undoing=True)
        self._copies.remove(made)

    # -- the parts a subclass may replace (the course layer plugs a learner's in) ---------

    def _new_pool(
        self,
        num_blocks: int,
        block_size: int,
        *,
        blocks_per_page: int | None,
        allocation: Allocation,
        eviction: PolicySpec,
        on_evict: Callable[[int], None] | None,
    ) -> CachingPool:
        """The pool the manager allocates from: a `BlockPool`."""
        return BlockPool(
            num_blocks,
            block_size,
            blocks_per_page=blocks_per_page,
            allocation=allocation,
            eviction=eviction,
            on_evict=on_evict,
        )

    def _prefix_hits(self, seq: TokenSequence) -> list[int]:
        """Cached blocks of the longest hit prefix of `seq` (never its last token); read-only."""
        if self.prefix_cache is None:
            return []
        max_hits = (len(seq.token_ids) - 1) // self.block_size  # the last token is computed
        return self.prefix_cache.match(seq, max_hits)

    def _new_table(self, seq_id: SeqId, hit_blocks: list[int], num_tokens: int) -> list[int]:
        """A new sequence's block table for `num_tokens` tokens: the prefix hits (shared)
        then fresh blocks; `OutOfBlocks` and no change if they do not fit."""
        hits = len(hit_blocks)
        need = blocks_needed(num_tokens, self.block_size) - hits
        available = self.pool.num_available
        if need + hits > available:  # cached hits come back to use: count them
            available -= self.pool.count_unreferenced(hit_blocks)
        if need > available:
            hit_note = f" ({hits} more are prefix hits)" if hits else ""
            raise OutOfBlocks(
                f"sequence {seq_id!r} needs {need} new blocks{hit_note} but only {available} "
                "can be had; free or preempt a sequence, or use a bigger pool.",
                requested=need,
                available=available,
            )
        self.pool.share_unchecked(hit_blocks)  # in use now: the allocation cannot evict them
        table = list(hit_blocks)
        hit_tokens = hits * self.block_size
        try:
            grow_block_table(self.pool, table, hit_tokens, num_tokens - hit_tokens)
        except BaseException:  # all or nothing: the hits are let go again
            self.pool.release_unchecked(hit_blocks[::-1], undoing=True)
            raise
        return table

    def _index_full_blocks(self, entry: SequenceEntry, full: int) -> list[int]:
        """Index `entry`'s full blocks from `entry.num_registered` up to `full`; return the
        blocks newly indexed (the caller keeps their content)."""
        if self.prefix_cache is None:
            return []
        kept, entry.index_path = self.prefix_cache.register_blocks(
            entry.seq, entry.block_table, entry.num_registered, full, entry.index_path
        )
        return kept

    def __repr__(self) -> str:
        return f"KVCacheManager({len(self._seqs)} sequences, {self.pool!r})"


def _append_refused(seq_id: SeqId, num_new: int, need: int, available: int) -> OutOfBlocks:
    return OutOfBlocks(
        f"appending {num_new} token(s) to {seq_id!r} needs {need} new block(s) but only "
        f"{available} can be had; free or preempt a sequence.",
        requested=need,
        available=available,
    )
