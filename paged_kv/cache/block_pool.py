"""The block pool: physical KV blocks, their reference counts, the free list and the cache.

It is the two layers of the cache, assembled: `RefCountPool` (reference counts, the free list,
pages) under `CachingPool` (cached blocks, the eviction policy, `on_evict`). Every operation
costs O(1) per block touched, whatever the pool size: a free list replaces the scan a first
version would do, pages are tracked with counters, and cached blocks are chosen for eviction
by an O(1) policy.
"""

from __future__ import annotations

from collections.abc import Callable

from paged_kv.cache.caching_pool import CachingPool
from paged_kv.cache.eviction import PolicySpec
from paged_kv.cache.ref_count_pool import Allocation, RefCountPool

__all__ = ["Allocation", "BlockPool"]


class BlockPool(CachingPool):
    """`num_blocks` physical blocks of `block_size` tokens, handed out by reference count.

    A block is free (ref 0, nothing kept), in use (ref >= 1), or cached (ref 0, content kept
    for reuse after `keep_content`). `allocate` takes free blocks first and evicts cached
    ones, chosen by the eviction policy, only when no free block is left. All or nothing.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int = 16,
        *,
        blocks_per_page: int | None = None,
        allocation: Allocation = "fifo",
        eviction: PolicySpec = "lru",
        on_evict: Callable[[int], None] | None = None,
    ) -> None:
        self.ref_counts = RefCountPool(
            num_blocks, block_size, blocks_per_page=blocks_per_page, allocation=allocation
        )
        super().__init__(self.ref_counts, eviction=eviction, on_evict=on_evict)
        self.blocks_per_page = blocks_per_page
        self.allocation: Allocation = allocation

    def free_pages(self) -> list[int]:
        """Pages whose blocks are all free: memory that could be given back. O(pages)."""
        return self.ref_counts.free_pages()

    def __repr__(self) -> str:
        pages = f", {self.num_pages} pages" if self.blocks_per_page else ""
        cached = f", {self.num_cached} cached" if self.num_cached else ""
        return (
            f"BlockPool({self.num_free}/{self.num_blocks} free{cached}, "
            f"block_size={self.block_size}{pages}, allocation={self.allocation!r})"
        )
