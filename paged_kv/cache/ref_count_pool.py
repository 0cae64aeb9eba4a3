"""The reference-counted free-list pool: chapter 01's idea, the library's own.

Each block has a reference count; the free ones (count 0) wait in a free list, so taking one
costs O(1) whatever the pool size; pages are tracked with counters. `allocate` is all or
nothing and `release` checks the whole batch before dropping anything. It knows nothing of
content: `CachingPool` adds cached blocks and eviction on top (`BlockPool` is the two).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from paged_kv.cache.block_ids import check_block_id, check_block_ids, check_drops
from paged_kv.cache.free_lists import FifoFreeList, PackedPagesFreeList
from paged_kv.errors import InvalidArgument, InvalidBlock, OutOfBlocks
from paged_kv.validation import require_int, require_positive_int

Allocation = Literal["fifo", "pack_pages"]


MAX_BLOCKS = 2**26
"""The most blocks a pool takes: about 50 bytes of host bookkeeping each (3 GiB at the cap),
and at 16 tokens a block a billion tokens, more K/V than any one device holds."""


class RefCountPool:
    """`num_blocks` blocks of `block_size` tokens, each free (count 0) or held (count >= 1).

    `allocation="fifo"` recycles ids evenly; `"pack_pages"` (with `blocks_per_page`) fills
    used pages first, so that whole pages stay free to give back.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int = 16,
        *,
        blocks_per_page: int | None = None,
        allocation: Allocation = "fifo",
    ) -> None:
        require_positive_int("num_blocks", num_blocks)
        require_positive_int("block_size", block_size)
        if num_blocks > MAX_BLOCKS:
            raise InvalidArgument(
                f"num_blocks={num_blocks} is more than a pool takes ({MAX_BLOCKS:,}); use "
                "bigger blocks (block_size) or fewer of them."
            )
        if blocks_per_page is not None:
            require_positive_int("blocks_per_page", blocks_per_page)
            if num_blocks % blocks_per_page:
                raise InvalidArgument(
                    f"num_blocks={num_blocks} is not a multiple of blocks_per_page="
                    f"{blocks_per_page}; pick num_blocks = pages * blocks_per_page."
                )
        if allocation not in ("fifo", "pack_pages"):
            raise InvalidArgument(f"allocation must be 'fifo' or 'pack_pages', got {allocation!r}.")
        if allocation == "pack_pages" and blocks_per_page is None:
            raise InvalidArgument(
                "allocation='pack_pages' needs pages: pass blocks_per_page as well."
            )
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.blocks_per_page = blocks_per_page
        self.allocation: Allocation = allocation
        self._ref = [0] * num_blocks
        self._free: FifoFreeList | PackedPagesFreeList = (
            PackedPagesFreeList(num_blocks, blocks_per_page)
            if blocks_per_page is not None and allocation == "pack_pages"
            else FifoFreeList(num_blocks)
        )
        pages = num_blocks // blocks_per_page if blocks_per_page else 0
        self._page_used = [0] * pages  # blocks with a reference, per page

    @property
    def num_free(self) -> int:
        """Blocks with no reference, ready to allocate."""
        return len(self._free)

    def allocate(self, n: int = 1) -> list[int]:
        """Take `n` free blocks at count 1; `OutOfBlocks` and no change if fewer are free."""
        if type(n) is not int or n < 0:
            n = require_int("allocate's n", n)
        if n > len(self._free):
            raise OutOfBlocks(
                f"asked for {n} blocks but only {len(self._free)} of {self.num_blocks} are "
                "free; release blocks or use a bigger pool.",
                requested=n,
                available=len(self._free),
            )
        take, refs = self._free.take, self._ref
        ids = [take() for _ in range(n)]
        for block_id in ids:
            refs[block_id] = 1
        if self.blocks_per_page:
            for block_id in ids:
                self._page_used[block_id // self.blocks_per_page] += 1
        return ids

    def share(self, block_ids: Iterable[int]) -> None:
        """One more reference on each block, all held; `InvalidBlock` and no change if one
        is free."""
        ids = check_block_ids(block_ids, self.num_blocks)
        refs = self._ref
        for block_id in ids:
            if not refs[block_id]:
                raise InvalidBlock(
                    f"block {block_id} is free, so it cannot be shared; allocate it first."
                )
        for block_id in ids:
            refs[block_id] += 1

    def release(self, block_ids: Iterable[int]) -> list[int]:
        """One reference fewer per id; return the blocks that reached 0 (free now), in that
        order. A foreign id or a double free raises `InvalidBlock` and releases nothing."""
        ids = check_block_ids(block_ids, self.num_blocks)
        refs = self._ref
        if len(set(ids)) != len(ids) or 0 in map(refs.__getitem__, ids):
            check_drops(ids, refs.__getitem__)  # the quick test above covers a block table
        freed, put = [], self._free.put
        per_page, page_used = self.blocks_per_page, self._page_used
        for block_id in ids:
            ref = refs[block_id] - 1
            refs[block_id] = ref
            if not ref:
                put(block_id)
                if per_page:
                    page_used[block_id // per_page] -= 1
                freed.append(block_id)
        return freed

    def ref_count(self, block_id: int) -> int:
        """How many holders reference `block_id`."""
        plain = type(block_id) is int and 0 <= block_id < self.num_blocks  # the common case
        return self._ref[block_id if plain else check_block_id(block_id, self.num_blocks)]

    def free_pages(self) -> list[int]:
        """Pages whose blocks are all free: memory that could be given back. O(pages)."""
        return [p for p, used in enumerate(self._page_used) if used == 0]

    def __repr__(self) -> str:
        return (
            f"RefCountPool({self.num_free}/{self.num_blocks} free, block_size={self.block_size}"
            f", allocation={self.allocation!r})"
        )
