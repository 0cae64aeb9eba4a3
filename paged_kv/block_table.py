"""Block-table arithmetic: which physical slot holds token t of a sequence.

A block table lists a sequence's physical block ids in logical order, so token t lives in
block `table[t // block_size]` at offset `t % block_size`.
"""

from __future__ import annotations

from collections.abc import Sequence

from paged_kv.block_pool import BlockPool
from paged_kv.errors import InvalidArgument


def blocks_needed(num_tokens: int, block_size: int) -> int:
    """Blocks that hold `num_tokens` tokens: the ceiling of num_tokens / block_size."""
    return -(-num_tokens // block_size)


def slot_mapping(block_table: Sequence[int], block_size: int, start: int, end: int) -> list[int]:
    """Slots of the tokens at positions start..end-1: where their K/V are written."""
    if not 0 <= start <= end <= len(block_table) * block_size:
        raise InvalidArgument(
            f"positions {start}..{end} do not fit in {len(block_table)} block(s) of "
            f"{block_size}; need 0 <= start <= end <= {len(block_table) * block_size}."
        )
    return [block_table[t // block_size] * block_size + t % block_size for t in range(start, end)]


def grow_block_table(
    pool: BlockPool, block_table: list[int], num_tokens: int, num_new_tokens: int
) -> list[int]:
    """Extend `block_table` (holding `num_tokens` tokens) to fit `num_new_tokens` more.

    Allocates only the blocks the new total needs beyond the table, all or nothing: on
    `OutOfBlocks` the table and the pool are unchanged. Returns the new block ids.
    """
    need = blocks_needed(num_tokens + num_new_tokens, pool.block_size) - len(block_table)
    new_blocks = pool.allocate(max(need, 0))
    block_table.extend(new_blocks)
    return new_blocks
