"""How the pool's memory is used right now: the manager's `stats()` answer, kept in O(1).

Blocks by state, tokens and table entries; sharing and internal fragmentation follow.
"""

from __future__ import annotations

from dataclasses import dataclass


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
