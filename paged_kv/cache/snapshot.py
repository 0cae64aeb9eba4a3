"""An immutable picture of every block at one moment, for views, tests and replays.

The pool and the manager fill it in; nothing reads live state through it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum


class BlockState(str, Enum):
    """The one state a block is in: free, cached (ref 0 but holds content), or in use."""

    FREE = "free"
    CACHED = "cached"
    IN_USE = "in_use"


@dataclass(frozen=True)
class BlockInfo:
    """One block: its state, ref count, page, the sequences holding it and tokens filled."""

    block_id: int
    state: BlockState
    ref_count: int
    page: int | None = None
    owners: tuple[Hashable, ...] = ()
    num_tokens: int = 0

    @property
    def shared(self) -> bool:
        """True when more than one holder references the block."""
        return self.ref_count > 1


@dataclass(frozen=True)
class PoolSnapshot:
    """Every block of a pool at one moment, in block-id order, and each sequence's table."""

    block_size: int
    blocks_per_page: int | None
    blocks: tuple[BlockInfo, ...]
    block_tables: Mapping[Hashable, tuple[int, ...]] = field(default_factory=dict)

    def count(self, state: BlockState) -> int:
        """How many blocks are in `state`."""
        return sum(1 for b in self.blocks if b.state is state)

    @property
    def num_shared(self) -> int:
        """How many blocks are referenced more than once."""
        return sum(1 for b in self.blocks if b.shared)

    def with_tables(self, tables: Mapping[Hashable, tuple[Sequence[int], int]]) -> PoolSnapshot:
        """This picture plus each sequence's (block table, length): who holds each block and
        how many tokens it holds."""
        owners: dict[int, tuple[Hashable, ...]] = {}
        filled: dict[int, int] = {}
        for seq_id, (table, length) in tables.items():
            for i, block_id in enumerate(table):
                owners[block_id] = (*owners.get(block_id, ()), seq_id)
                in_block = min(self.block_size, length - i * self.block_size)
                filled[block_id] = max(filled.get(block_id, 0), in_block)
        blocks = tuple(
            replace(b, owners=owners[b.block_id], num_tokens=filled[b.block_id])
            if b.block_id in owners
            else b
            for b in self.blocks
        )
        block_tables = {seq_id: tuple(table) for seq_id, (table, _) in tables.items()}
        return replace(self, blocks=blocks, block_tables=block_tables)

    def free_pages(self) -> list[int]:
        """Pages whose blocks are all free (empty when pages are off)."""
        if self.blocks_per_page is None:
            return []
        busy = {b.page for b in self.blocks if b.state is not BlockState.FREE}
        return [p for p in range(len(self.blocks) // self.blocks_per_page) if p not in busy]
