"""The KV-cache manager: one block table per sequence, grown as tokens arrive, shared by prefix.

The engine talks to this class only. A new sequence reuses the cached blocks of the longest
prefix it shares with earlier ones, and gets fresh blocks for the rest; full blocks are
registered in the prefix cache as they fill; freed blocks stay cached until evicted.
"""

from __future__ import annotations

import operator
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from paged_kv.cache.block_pool import Allocation, BlockPool
from paged_kv.cache.block_table import (
    blocks_needed,
    copy_on_write,
    grow_block_table,
    last_block_is_shared_and_partial,
    slot_mapping,
)
from paged_kv.cache.eviction import PolicySpec
from paged_kv.cache.hashing import BlockHash, ExtraKey, Salt, block_hashes, check_salt
from paged_kv.cache.hit_metrics import HitRates, PrefixHitCounter
from paged_kv.cache.prefix_cache import PrefixCache
from paged_kv.cache.snapshot import PoolSnapshot
from paged_kv.errors import (
    CacheBusy,
    DuplicateSequence,
    InvalidArgument,
    OutOfBlocks,
    UnknownSequence,
)

SeqId = Hashable


@dataclass(frozen=True)
class UsageStats:
    """How the pool's memory is used right now."""

    num_blocks: int
    num_free_blocks: int
    num_in_use_blocks: int
    num_cached_blocks: int
    evictions: int
    num_sequences: int
    num_tokens: int
    num_table_blocks: int
    block_size: int

    @property
    def usage(self) -> float:
        """Fraction of blocks in use (cached blocks are not: they can be evicted)."""
        return self.num_in_use_blocks / self.num_blocks

    @property
    def blocks_saved_by_sharing(self) -> int:
        """Block-table entries minus blocks in use: what sharing spared."""
        return self.num_table_blocks - self.num_in_use_blocks

    @property
    def internal_fragmentation(self) -> float:
        """Fraction of the sequences' slots that hold no token (unfilled last blocks)."""
        slots = self.num_table_blocks * self.block_size
        return 1 - self.num_tokens / slots if slots else 0.0


@dataclass
class _SequenceEntry:
    token_ids: list[int]
    block_table: list[int]
    salt: Salt
    extra_keys: tuple[ExtraKey, ...]
    block_hashes: list[BlockHash] = field(default_factory=list)  # of its full blocks
    num_cached_tokens: int = 0


class KVCacheManager:
    """Block tables for many sequences over one `BlockPool`, with prefix caching.

    `add_sequence` reuses cached blocks of the longest matching prefix and allocates the
    rest, `append_tokens` adds a block only when the last one is full (copying a shared
    last block first), `fork` shares every block with a child, `free_sequence` releases
    them (full blocks stay cached). Every call is all or nothing.
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
    ) -> None:
        self.prefix_cache = PrefixCache() if prefix_caching else None
        self.pool = BlockPool(
            num_blocks,
            block_size,
            blocks_per_page=blocks_per_page,
            allocation=allocation,
            eviction=eviction,
            on_evict=self.prefix_cache.forget if self.prefix_cache is not None else None,
        )
        self.block_size = block_size
        self.hits = PrefixHitCounter(hit_rate_window)
        self._seqs: dict[SeqId, _SequenceEntry] = {}
        self._num_tokens = 0
        self._table_blocks = 0
        self._copies: list[tuple[int, int]] = []

    # -- sequence lifecycle --------------------------------------------------------------

    def add_sequence(
        self,
        seq_id: SeqId,
        token_ids: Sequence[int],
        *,
        salt: Salt = None,
        extra_keys: Sequence[ExtraKey] = (),
    ) -> list[int]:
        """Start `seq_id` with its prompt; return its block table.

        Full blocks already cached for the same salt, extra keys and preceding tokens are
        shared instead of allocated, except that the last prompt token is never a hit (its
        logits must be computed). `num_cached_tokens(seq_id)` says how many tokens hit.
        Raises `OutOfBlocks` if the rest does not fit, changing nothing.
        """
        if seq_id in self._seqs:
            raise DuplicateSequence(
                f"sequence {seq_id!r} already exists; free it first or pick a new id."
            )
        tokens = _check_tokens(token_ids, "the prompt")
        if not tokens:
            raise InvalidArgument(f"sequence {seq_id!r} needs at least one prompt token.")
        entry = _SequenceEntry(tokens, [], check_salt(salt), tuple(extra_keys))
        hashes, hit_blocks = self._prefix_hits(entry)
        revived = sum(1 for b in hit_blocks if self.pool.ref_count(b) == 0)
        need = blocks_needed(len(tokens), self.block_size) - len(hit_blocks)
        if need > self.pool.num_available - revived:
            hits = f" ({len(hit_blocks)} more are prefix hits)" if hit_blocks else ""
            raise OutOfBlocks(
                f"sequence {seq_id!r} needs {need} new blocks{hits} but only "
                f"{self.pool.num_available - revived} can be had; free or preempt a sequence, "
                "or use a bigger pool.",
                requested=need,
                available=self.pool.num_available - revived,
            )
        self.pool.share(hit_blocks)  # in use now: the allocation below cannot evict them
        entry.block_table = list(hit_blocks)
        hit_tokens = len(hit_blocks) * self.block_size
        grow_block_table(self.pool, entry.block_table, hit_tokens, len(tokens) - hit_tokens)
        entry.num_cached_tokens = hit_tokens
        self._register_full_blocks(entry, hashes)
        self._seqs[seq_id] = entry
        self._num_tokens += len(tokens)
        self._table_blocks += len(entry.block_table)
        self.hits.record(len(tokens), hit_tokens)
        return list(entry.block_table)

    def append_tokens(self, seq_id: SeqId, token_ids: Sequence[int]) -> list[int]:
        """Add decoded tokens to `seq_id`; return the block ids appended to its table.

        If the last block is partly filled and shared (after a `fork`), it is first copied
        to a block of its own (copy-on-write); `pop_block_copies` hands those copies to the
        KV storage. Newly full blocks are registered for prefix caching.
        """
        entry = self._entry(seq_id)
        tokens = _check_tokens(token_ids, "the appended tokens")
        if not tokens:
            return []
        table, length = entry.block_table, len(entry.token_ids)
        need = self._blocks_to_append(entry, len(tokens))
        if need > self.pool.num_available:
            raise OutOfBlocks(
                f"appending {len(tokens)} token(s) to {seq_id!r} needs {need} new block(s) but "
                f"only {self.pool.num_available} can be had; free or preempt a sequence.",
                requested=need,
                available=self.pool.num_available,
            )
        copy = copy_on_write(self.pool, table, length)
        if copy is not None:
            self._copies.append(copy)
        new_blocks = grow_block_table(self.pool, table, length, len(tokens))
        entry.token_ids.extend(tokens)
        self._num_tokens += len(tokens)
        self._table_blocks += len(new_blocks)
        if self.prefix_cache is not None:
            full = len(entry.token_ids) // self.block_size * self.block_size
            start = len(entry.block_hashes) * self.block_size
            self._register_full_blocks(entry, self._hashes(entry, start, full))
        return new_blocks

    def fork(self, parent_id: SeqId, child_id: SeqId) -> list[int]:
        """Start `child_id` as a copy of `parent_id` sharing all its blocks; return its table.

        For parallel sampling and beam search: no block is copied until one of them appends
        into the shared, partly filled last block.
        """
        parent = self._entry(parent_id)
        if child_id in self._seqs:
            raise DuplicateSequence(f"sequence {child_id!r} already exists; fork into a new id.")
        self.pool.share(parent.block_table)
        child = _SequenceEntry(
            list(parent.token_ids),
            list(parent.block_table),
            parent.salt,
            parent.extra_keys,
            list(parent.block_hashes),
            parent.num_cached_tokens,
        )
        self._seqs[child_id] = child
        self._num_tokens += len(child.token_ids)
        self._table_blocks += len(child.block_table)
        return list(child.block_table)

    def free_sequence(self, seq_id: SeqId) -> None:
        """Forget `seq_id` and release its blocks, last first; registered ones stay cached."""
        entry = self._entry(seq_id)
        self.pool.release(reversed(entry.block_table))
        self._num_tokens -= len(entry.token_ids)
        self._table_blocks -= len(entry.block_table)
        del self._seqs[seq_id]

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
        self, token_ids: Sequence[int], *, salt: Salt = None, extra_keys: Sequence[ExtraKey] = ()
    ) -> int:
        """How many leading tokens of this prompt `add_sequence` would find cached now.

        Read-only: no block changes state and no hit is counted, so a scheduler can price
        a request (prompt tokens minus hits) before admitting it.
        """
        tokens = _check_tokens(token_ids, "the prompt")
        entry = _SequenceEntry(tokens, [], check_salt(salt), tuple(extra_keys))
        return len(self._prefix_hits(entry)[1]) * self.block_size

    def can_allocate(self, num_tokens: int) -> bool:
        """Would a new sequence with a `num_tokens`-token prompt fit right now?"""
        _check_count("num_tokens", num_tokens)
        return blocks_needed(num_tokens, self.block_size) <= self.pool.num_available

    def can_append(self, seq_id: SeqId, num_new_tokens: int = 1) -> bool:
        """Would appending `num_new_tokens` to `seq_id` fit right now?"""
        _check_count("num_new_tokens", num_new_tokens)
        return (
            self._blocks_to_append(self._entry(seq_id), num_new_tokens) <= self.pool.num_available
        )

    # -- reading a sequence --------------------------------------------------------------

    def block_table(self, seq_id: SeqId) -> list[int]:
        """Physical block ids of `seq_id` in logical order (a copy)."""
        return list(self._entry(seq_id).block_table)

    def slot_mapping(self, seq_id: SeqId, start: int = 0, end: int | None = None) -> list[int]:
        """Slots of tokens start..end-1 of `seq_id` (default: all of them)."""
        entry = self._entry(seq_id)
        stop = len(entry.token_ids) if end is None else end
        if not 0 <= start <= stop <= len(entry.token_ids):
            raise InvalidArgument(
                f"sequence {seq_id!r} has {len(entry.token_ids)} tokens; positions "
                f"{start}..{stop} are out of range."
            )
        return slot_mapping(entry.block_table, self.block_size, start, stop)

    def token_ids(self, seq_id: SeqId) -> list[int]:
        """All tokens of `seq_id` so far (a copy)."""
        return list(self._entry(seq_id).token_ids)

    def num_tokens(self, seq_id: SeqId) -> int:
        """Length of `seq_id` in tokens."""
        return len(self._entry(seq_id).token_ids)

    def num_cached_tokens(self, seq_id: SeqId) -> int:
        """How many of `seq_id`'s prompt tokens were prefix-cache hits when it was added."""
        return self._entry(seq_id).num_cached_tokens

    def hit_rates(self) -> HitRates:
        """Prefix-cache hit rates in tokens, overall and over the recent requests."""
        return self.hits.rates()

    @property
    def sequence_ids(self) -> list[SeqId]:
        """Ids of the live sequences, oldest first."""
        return list(self._seqs)

    def __contains__(self, seq_id: object) -> bool:
        return seq_id in self._seqs

    def __len__(self) -> int:
        return len(self._seqs)

    # -- whole-cache views ---------------------------------------------------------------

    def stats(self) -> UsageStats:
        """Block and token counts right now. O(1)."""
        return UsageStats(
            num_blocks=self.pool.num_blocks,
            num_free_blocks=self.pool.num_free,
            num_in_use_blocks=self.pool.num_in_use,
            num_cached_blocks=self.pool.num_cached,
            evictions=sum(self.pool.evictions.values()),
            num_sequences=len(self._seqs),
            num_tokens=self._num_tokens,
            num_table_blocks=self._table_blocks,
            block_size=self.block_size,
        )

    def snapshot(self) -> PoolSnapshot:
        """Every block with its state, ref count, owning sequences and tokens filled."""
        filled: dict[int, int] = {}
        for entry in self._seqs.values():
            for i, block_id in enumerate(entry.block_table):
                in_block = min(self.block_size, len(entry.token_ids) - i * self.block_size)
                filled[block_id] = max(filled.get(block_id, 0), in_block)
        tables = {seq_id: entry.block_table for seq_id, entry in self._seqs.items()}
        return self.pool.snapshot(tables, filled)

    def _blocks_to_append(self, entry: _SequenceEntry, num_new_tokens: int) -> int:
        """New blocks an append needs: the growth, plus one for a copy-on-write copy."""
        length, table = len(entry.token_ids), entry.block_table
        copy = last_block_is_shared_and_partial(self.pool, table, length)
        return blocks_needed(length + num_new_tokens, self.block_size) - len(table) + copy

    def _prefix_hits(self, entry: _SequenceEntry) -> tuple[list[BlockHash], list[int]]:
        """The prompt's full-block hashes and the cached blocks of its longest hit prefix."""
        if self.prefix_cache is None:
            return [], []
        hashes = self._hashes(entry, 0, len(entry.token_ids))
        max_hits = (len(entry.token_ids) - 1) // self.block_size  # the last token is computed
        return hashes, self.prefix_cache.longest_prefix(hashes[:max_hits])

    def _hashes(self, entry: _SequenceEntry, start: int, end: int) -> list[BlockHash]:
        """Chained hashes of `entry`'s full blocks covering tokens start..end-1."""
        return block_hashes(
            entry.token_ids[start:end],
            self.block_size,
            salt=entry.salt,
            extra_keys=entry.extra_keys,
            parent=entry.block_hashes[-1] if start else None,
        )

    def _register_full_blocks(self, entry: _SequenceEntry, hashes: list[BlockHash]) -> None:
        """Index the full blocks `hashes` describe (continuing entry's chain) and keep them."""
        first = len(entry.block_hashes)
        for i, block_hash in enumerate(hashes, start=first):
            block = entry.block_table[i]
            if self.prefix_cache.hash_of(block) != block_hash and self.prefix_cache.register(
                block, block_hash
            ):
                self.pool.keep_content([block])
        entry.block_hashes.extend(hashes)

    def _entry(self, seq_id: SeqId) -> _SequenceEntry:
        try:
            return self._seqs[seq_id]
        except (KeyError, TypeError):
            raise UnknownSequence(
                f"no sequence {seq_id!r}; live sequences: {_preview(self._seqs)}. "
                "Add it with add_sequence first (freed sequences are gone)."
            ) from None

    def __repr__(self) -> str:
        return f"KVCacheManager({len(self._seqs)} sequences, {self.pool!r})"


def _check_tokens(token_ids: Sequence[int], what: str) -> list[int]:
    """Copy token ids as plain ints (numpy and torch integers welcome); reject anything else."""
    tokens = []
    for t in token_ids:
        try:
            value = operator.index(t)
        except TypeError:
            value = -1
        if isinstance(t, bool) or value < 0:
            raise InvalidArgument(f"{what} must be token ids (ints >= 0); found {t!r}.")
        tokens.append(value)
    return tokens


def _check_count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgument(f"{name} must be an int >= 0, got {value!r}.")


def _preview(seqs: dict[SeqId, _SequenceEntry], limit: int = 5) -> str:
    ids = list(seqs)
    shown = ", ".join(repr(s) for s in ids[:limit])
    return f"[{shown}{', ...' if len(ids) > limit else ''}] ({len(ids)} in all)"
