"""The KV-cache manager: one block table per sequence, grown as tokens arrive.

The engine talks to this class only. It asks the pool for blocks when a sequence starts or
its last block fills up, and gives them back when the sequence is freed.
"""

from __future__ import annotations

import operator
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from paged_kv.block_pool import Allocation, BlockPool
from paged_kv.block_table import blocks_needed, grow_block_table, slot_mapping
from paged_kv.errors import DuplicateSequence, InvalidArgument, UnknownSequence
from paged_kv.eviction import EvictionPolicy
from paged_kv.snapshot import PoolSnapshot

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
    block_size: int

    @property
    def usage(self) -> float:
        """Fraction of blocks in use (cached blocks are not: they can be evicted)."""
        return self.num_in_use_blocks / self.num_blocks

    @property
    def reserved_slots(self) -> int:
        """Token slots in blocks that are in use."""
        return self.num_in_use_blocks * self.block_size

    @property
    def internal_fragmentation(self) -> float:
        """Fraction of in-use slots that hold no token (the unfilled tails of last blocks)."""
        return 1 - self.num_tokens / self.reserved_slots if self.reserved_slots else 0.0


@dataclass
class _SequenceEntry:
    token_ids: list[int]
    block_table: list[int]


class KVCacheManager:
    """Block tables for many sequences over one `BlockPool`.

    `add_sequence` allocates blocks for a prompt, `append_tokens` adds a block only when the
    last one is full, `free_sequence` returns them. Every call is all-or-nothing.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int = 16,
        *,
        blocks_per_page: int | None = None,
        allocation: Allocation = "fifo",
        eviction: str | EvictionPolicy | type[EvictionPolicy] = "lru",
    ) -> None:
        self.pool = BlockPool(
            num_blocks,
            block_size,
            blocks_per_page=blocks_per_page,
            allocation=allocation,
            eviction=eviction,
        )
        self.block_size = block_size
        self._seqs: dict[SeqId, _SequenceEntry] = {}
        self._num_tokens = 0

    # -- sequence lifecycle --------------------------------------------------------------

    def add_sequence(self, seq_id: SeqId, token_ids: Sequence[int]) -> list[int]:
        """Start `seq_id` with its prompt; return its block table. Raises `OutOfBlocks` if short."""
        if seq_id in self._seqs:
            raise DuplicateSequence(
                f"sequence {seq_id!r} already exists; free it first or pick a new id."
            )
        tokens = _check_tokens(token_ids, "the prompt")
        if not tokens:
            raise InvalidArgument(f"sequence {seq_id!r} needs at least one prompt token.")
        table: list[int] = []
        grow_block_table(self.pool, table, 0, len(tokens))
        self._seqs[seq_id] = _SequenceEntry(tokens, table)
        self._num_tokens += len(tokens)
        return list(table)

    def append_tokens(self, seq_id: SeqId, token_ids: Sequence[int]) -> list[int]:
        """Add decoded tokens to `seq_id`; return the block ids newly allocated (often none)."""
        entry = self._entry(seq_id)
        tokens = _check_tokens(token_ids, "the appended tokens")
        new_blocks = grow_block_table(
            self.pool, entry.block_table, len(entry.token_ids), len(tokens)
        )
        entry.token_ids.extend(tokens)
        self._num_tokens += len(tokens)
        return new_blocks

    def free_sequence(self, seq_id: SeqId) -> None:
        """Forget `seq_id` and release its blocks, last block first."""
        entry = self._entry(seq_id)
        self.pool.release(reversed(entry.block_table))
        self._num_tokens -= len(entry.token_ids)
        del self._seqs[seq_id]

    # -- questions the scheduler asks ----------------------------------------------------

    def can_allocate(self, num_tokens: int) -> bool:
        """Would a new sequence with a `num_tokens`-token prompt fit right now?"""
        _check_count("num_tokens", num_tokens)
        return blocks_needed(num_tokens, self.block_size) <= self.pool.num_available

    def can_append(self, seq_id: SeqId, num_new_tokens: int = 1) -> bool:
        """Would appending `num_new_tokens` to `seq_id` fit right now?"""
        _check_count("num_new_tokens", num_new_tokens)
        entry = self._entry(seq_id)
        need = blocks_needed(len(entry.token_ids) + num_new_tokens, self.block_size)
        return need - len(entry.block_table) <= self.pool.num_available

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
