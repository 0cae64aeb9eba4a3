"""The manager's live sequences, and what can be read from them without changing anything.

A live sequence is its tokens and its block table; the questions below only read them.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from paged_kv.cache.block_table import slot_mapping
from paged_kv.cache.caching_pool import CachingPool
from paged_kv.cache.hit_metrics import HitRates, PrefixHitCounter
from paged_kv.cache.sequence import TokenSequence
from paged_kv.cache.snapshot import PoolSnapshot
from paged_kv.cache.usage import UsageStats
from paged_kv.errors import InvalidArgument, UnknownSequence

SeqId = Hashable


@dataclass(eq=False)
class SequenceEntry:
    """A live sequence: its tokens (owned by whoever passed them in) and its block table."""

    seq: TokenSequence
    block_table: list[int]
    num_registered: int  # full blocks already offered to the prefix cache
    room: int  # tokens the table holds without growing; 0 once forked (appends check)
    forked: bool = False  # its last block may be shared since a fork: check before writing
    index_path: Any = (
        None  # what it holds in the prefix index, handed back unread (see PrefixIndex)
    )


class LiveSequences:
    """`KVCacheManager`'s read-only side: a sequence's table, slots and tokens, and the counts
    and snapshot of the whole cache. The manager keeps `_seqs` and the counters up to date."""

    pool: CachingPool
    block_size: int
    hits: PrefixHitCounter
    _seqs: dict[SeqId, SequenceEntry]
    _num_tokens: int
    _table_blocks: int

    # -- reading a sequence --------------------------------------------------------------

    def block_table(self, seq_id: SeqId) -> list[int]:
        """Physical block ids of `seq_id` in logical order (a copy)."""
        return list(self._entry(seq_id).block_table)

    def slot_mapping(self, seq_id: SeqId, start: int = 0, end: int | None = None) -> list[int]:
        """Slots of tokens start..end-1 of `seq_id` (default: all of them)."""
        entry = self._entry(seq_id)
        length = len(entry.seq.token_ids)
        stop = length if end is None else end
        if not 0 <= start <= stop <= length:
            raise InvalidArgument(
                f"sequence {seq_id!r} has {length} tokens; positions {start}..{stop} are out "
                "of range."
            )
        return slot_mapping(entry.block_table, self.block_size, start, stop)

    def token_ids(self, seq_id: SeqId) -> list[int]:
        """All tokens of `seq_id` so far (a copy)."""
        return list(self._entry(seq_id).seq.token_ids)

    def num_tokens(self, seq_id: SeqId) -> int:
        """Length of `seq_id` in tokens."""
        return len(self._entry(seq_id).seq.token_ids)

    def num_cached_tokens(self, seq_id: SeqId) -> int:
        """How many of `seq_id`'s prompt tokens were prefix-cache hits when it was added."""
        return self._entry(seq_id).seq.num_cached_tokens

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
        """Every block with its state, ref count, owning sequences and tokens filled.

        The pool knows states and ref counts; who owns a block and how full it is are the
        block tables' facts, added here."""
        tables = {seq_id: (e.block_table, len(e.seq.token_ids)) for seq_id, e in self._seqs.items()}
        return self.pool.snapshot().with_tables(tables)

    def _entry(self, seq_id: SeqId) -> SequenceEntry:
        try:
            return self._seqs[seq_id]
        except (KeyError, TypeError):
            raise UnknownSequence(
                f"no sequence {seq_id!r}; live sequences: {_preview(self._seqs)}. "
                "Add it with add_sequence first (freed sequences are gone)."
            ) from None


def _preview(seqs: dict[SeqId, SequenceEntry], limit: int = 5) -> str:
    ids = list(seqs)
    shown = ", ".join(repr(s) for s in ids[:limit])
    return f"[{shown}{', ...' if len(ids) > limit else ''}] ({len(ids)} in all)"
