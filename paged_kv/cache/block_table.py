"""Block-table arithmetic: which physical slot holds token t of a sequence.

A block table lists a sequence's physical block ids in logical order, so token t lives in
block `table[t // block_size]` at offset `t % block_size`.
"""

from __future__ import annotations

from collections.abc import Sequence

from paged_kv.cache.caching_pool import CachingPool
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
    pool: CachingPool, block_table: list[int], num_tokens: int, num_new_tokens: int
) -> list[int]:
    """Extend `block_table` (holding `num_tokens` tokens) to fit `num_new_tokens` more.

    Allocates only the blocks the new total needs beyond the table, all or nothing: on
    `OutOfBlocks` the table and the pool are unchanged. Returns the new block ids.
    """
    need = blocks_needed(num_tokens + num_new_tokens, pool.block_size) - len(block_table)
    new_blocks = pool.allocate(max(need, 0))
    block_table.extend(new_blocks)
    return new_blocks


def copy_on_write(
    pool: CachingPool, block_table: list[int], num_tokens: int
) -> tuple[int, int] | None:
    """Before appending, give the table its own copy of a shared, partly filled last block.

    Returns (source, destination) for the KV storage to copy, or None when the last block is
    full (appends go to a new block) or not shared. Raises `OutOfBlocks`, changing nothing,
    if no block can be had for the copy.
    """
    if not last_block_is_shared_and_partial(pool, block_table, num_tokens):
        return None
    [private] = pool.allocate(1)
    shared = block_table[-1]
    try:
        pool.release([shared])
    except BaseException:  # all or nothing: the copy is not made
        pool.release([private])
        raise
    block_table[-1] = private
    return shared, private


def last_block_is_shared_and_partial(
    pool: CachingPool, block_table: list[int], num_tokens: int
) -> bool:
    """Would appending to this table write into a block that others read? (Then copy it.)"""
    return num_tokens % pool.block_size != 0 and pool.is_shared(block_table[-1])
