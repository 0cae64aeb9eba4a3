"""The block pool: physical KV blocks, their reference counts, the free list and the cache.

Every operation costs O(1) per block touched, whatever the pool size: a free list replaces
the scan a first version would do, pages are tracked with counters, and cached blocks are
chosen for eviction by an O(1) policy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import countOf
from typing import Literal

from paged_kv.cache.eviction import PolicySpec, make_policy
from paged_kv.cache.free_lists import FifoFreeList, PackedPagesFreeList
from paged_kv.cache.snapshot import BlockInfo, BlockState, PoolSnapshot
from paged_kv.errors import InvalidArgument, InvalidBlock, OutOfBlocks
from paged_kv.validation import as_int, require_int, require_positive_int

Allocation = Literal["fifo", "pack_pages"]
MAX_BLOCKS = 2**26
"""The most blocks a pool takes: about 50 bytes of host bookkeeping each (3 GiB at the cap),
and at 16 tokens a block a billion tokens, more K/V than any one device holds."""


class BlockPool:
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
        self.policy = make_policy(eviction)
        self.on_evict = on_evict
        self.evictions: dict[str, int] = {"allocation": 0, "reset": 0}
        self._ref = [0] * num_blocks
        self._keeps = bytearray(num_blocks)  # 1: the block's content is kept when released
        self._free: FifoFreeList | PackedPagesFreeList = (
            PackedPagesFreeList(num_blocks, blocks_per_page)
            if allocation == "pack_pages"
            else FifoFreeList(num_blocks)
        )
        self._page_used = [0] * self.num_pages  # blocks in use or cached, per page

    # -- sizes ---------------------------------------------------------------------------

    @property
    def num_pages(self) -> int:
        """Number of pages (0 when pages are off)."""
        return self.num_blocks // self.blocks_per_page if self.blocks_per_page else 0

    @property
    def num_free(self) -> int:
        """Blocks holding nothing, ready to allocate."""
        return len(self._free)

    @property
    def num_cached(self) -> int:
        """Blocks with no reference that keep their content until evicted."""
        return len(self.policy)

    @property
    def num_in_use(self) -> int:
        """Blocks with at least one reference."""
        return self.num_blocks - len(self._free) - len(self.policy)

    @property
    def num_available(self) -> int:
        """Blocks an allocation can get: free ones, then cached ones by eviction."""
        return len(self._free) + len(self.policy)

    # -- allocation ----------------------------------------------------------------------

    def allocate(self, n: int = 1) -> list[int]:
        """Take `n` blocks at ref count 1, free ones first, then evicting cached ones.

        If fewer than `n` are available, raise `OutOfBlocks` and change nothing.
        """
        if type(n) is not int or n < 0:
            n = require_int("allocate's n", n)
        from_free, refs = len(self._free), self._ref
        if n <= from_free:
            from_free = n
        elif n - from_free > len(self.policy):  # more than free and cached blocks together
            raise OutOfBlocks(
                f"asked for {n} blocks but only {self.num_available} of {self.num_blocks} are "
                "free or evictable; release blocks (finish or preempt a sequence) or use a "
                "bigger pool.",
                requested=n,
                available=self.num_available,
            )
        take = self._free.take
        ids = [take() for _ in range(from_free)] if from_free else []
        if self.blocks_per_page:
            for block_id in ids:
                self._page_used[block_id // self.blocks_per_page] += 1
        for _ in range(n - from_free):
            ids.append(self._drop_content(self.policy.evict(), "allocation"))
        for block_id in ids:
            refs[block_id] = 1
        return ids

    def keep_content(self, block_ids: Iterable[int]) -> None:
        """Mark in-use blocks as worth keeping: released, they become cached, not free."""
        ids = self._check_ids(block_ids)
        for block_id in ids:
            if self._ref[block_id] == 0:
                raise InvalidBlock(
                    f"block {block_id} has no reference; only blocks in use can be kept."
                )
        self.keep_content_unchecked(ids)

    def keep_content_unchecked(self, block_ids: Iterable[int]) -> None:
        """`keep_content` for blocks the caller holds (the manager's own tables): no checks."""
        keeps, touch = self._keeps, self.policy.touch
        for block_id in block_ids:
            if not keeps[block_id]:
                keeps[block_id] = 1
                touch(block_id)

    def share(self, block_ids: Iterable[int]) -> None:
        """Add one reference to each block: in use, or cached (a hit that revives it)."""
        ids = self._check_ids(block_ids)
        refs, keeps = self._ref, self._keeps
        for block_id in ids:
            if not refs[block_id] and not keeps[block_id]:
                raise InvalidBlock(
                    f"block {block_id} is free, so it cannot be shared; allocate it first."
                )
        self.share_unchecked(ids)

    def share_unchecked(self, block_ids: Iterable[int]) -> None:
        """`share` for blocks known to hold content (a table's, or the hits the prefix index
        names): ids this pool handed out, so they are not checked again."""
        refs, keeps, revive, touch = self._ref, self._keeps, self.policy.revive, self.policy.touch
        for block_id in block_ids:
            if not refs[block_id]:
                revive(block_id)
            if keeps[block_id]:
                touch(block_id)
            refs[block_id] += 1

    def release(self, block_ids: Iterable[int]) -> list[int]:
        """Drop one reference per id; return the blocks that lost their last reference.

        Those become cached if their content is kept, free otherwise. Validates everything
        first: a double free or foreign id raises `InvalidBlock` and releases nothing.
        """
        ids = self._check_ids(block_ids)
        refs = self._ref
        distinct = len(set(ids)) == len(ids)  # a block table: each id once
        if not (distinct and 0 not in map(refs.__getitem__, ids)):
            self._check_drops(ids)
        return self.release_unchecked(ids)

    def release_unchecked(self, block_ids: Iterable[int]) -> list[int]:
        """`release` for references the caller is known to hold (a block table the manager
        built from this pool's ids): nothing is checked, as vLLM's `free_blocks` does."""
        refs, keeps, unreferenced = self._ref, self._keeps, []
        make_evictable, put_free = self.policy.make_evictable, self._put_free
        for block_id in block_ids:
            ref = refs[block_id] - 1
            refs[block_id] = ref
            if not ref:
                if keeps[block_id]:
                    make_evictable(block_id)
                else:
                    put_free(block_id)
                unreferenced.append(block_id)
        return unreferenced

    def _check_drops(self, ids: list[int]) -> None:
        """Raise `InvalidBlock` if `ids` drops some block more often than it is referenced."""
        drops: dict[int, int] = {}
        for block_id in ids:
            drops[block_id] = drops.get(block_id, 0) + 1
        for block_id, times in drops.items():
            if times > self._ref[block_id]:
                raise InvalidBlock(
                    f"block {block_id} has {self._ref[block_id]} reference(s) but release was "
                    f"asked to drop {times}: a double free. Release each reference once."
                )

    def discard(self, block_ids: Iterable[int]) -> None:
        """Drop the content of these cached blocks now (they become free, whoever indexed them
        is told), without counting an eviction: for blocks whose K/V a failed step never
        wrote. Each must be cached (no reference, content kept), else `InvalidBlock`, nothing
        changed."""
        ids = list(dict.fromkeys(self._check_ids(block_ids)))
        for block_id in ids:
            if self._ref[block_id] or not self._keeps[block_id]:
                raise InvalidBlock(
                    f"block {block_id} is {self.state(block_id).value}; only cached blocks can "
                    "be discarded (free the sequences that hold it first)."
                )
        for block_id in ids:
            self.policy.forget(block_id)
            self._keeps[block_id] = 0
            if self.on_evict is not None:
                self.on_evict(block_id)
            self._put_free(block_id)

    def evict_all_cached(self) -> int:
        """Drop every cached block's content (they become free); return how many."""
        count = len(self.policy)
        for _ in range(count):
            self._put_free(self._drop_content(self.policy.evict(), "reset"))
        return count

    # -- queries -------------------------------------------------------------------------

    def ref_count(self, block_id: int) -> int:
        """How many holders reference `block_id`."""
        return self._ref[self._check_id(block_id)]

    def count_unreferenced(self, block_ids: Iterable[int]) -> int:
        """How many of these blocks have no reference (cached ones, for a prefix hit)."""
        return list(map(self._ref.__getitem__, self._check_ids(block_ids))).count(0)

    def is_shared(self, block_id: int) -> bool:
        """Does more than one holder reference `block_id`? (Appending to it must copy it.)"""
        return self._ref[self._check_id(block_id)] > 1

    def state(self, block_id: int) -> BlockState:
        """The block's state."""
        if self.ref_count(block_id):
            return BlockState.IN_USE
        return BlockState.CACHED if self._keeps[block_id] else BlockState.FREE

    def page_of(self, block_id: int) -> int:
        """The page that holds `block_id` (pages must be on)."""
        if not self.blocks_per_page:
            raise InvalidArgument("this pool has no pages; create it with blocks_per_page=...")
        return self._check_id(block_id) // self.blocks_per_page

    def free_pages(self) -> list[int]:
        """Pages whose blocks are all free: memory that could be given back. O(pages)."""
        return [p for p, used in enumerate(self._page_used) if used == 0]

    def releasable_bytes(self, bytes_per_block: int) -> int:
        """Bytes held by entirely free pages, for blocks of `bytes_per_block` bytes each."""
        require_positive_int("bytes_per_block", bytes_per_block)
        return len(self.free_pages()) * (self.blocks_per_page or 0) * bytes_per_block

    def snapshot(self) -> PoolSnapshot:
        """Freeze every block's state and ref count (the manager adds owners and tables)."""
        per_page = self.blocks_per_page
        blocks = tuple(
            BlockInfo(
                block_id=b,
                state=self.state(b),
                ref_count=ref,
                page=b // per_page if per_page else None,
            )
            for b, ref in enumerate(self._ref)
        )
        return PoolSnapshot(self.block_size, per_page, blocks)

    def _put_free(self, block_id: int) -> None:
        self._free.put(block_id)
        if self.blocks_per_page:
            self._page_used[block_id // self.blocks_per_page] -= 1

    def _drop_content(self, block_id: int, reason: str) -> int:
        """An evicted block forgets its content; whoever indexed it is told."""
        self._keeps[block_id] = 0
        self.evictions[reason] += 1
        if self.on_evict is not None:
            self.on_evict(block_id)
        return block_id

    def _check_ids(self, block_ids: Iterable[object]) -> list[int]:
        """`block_ids` as a list of valid ids: plain in-range ints at C speed, else one by one."""
        ids = list(block_ids)
        plain = ids and countOf(map(type, ids), int) == len(ids)
        if plain and min(ids) >= 0 and max(ids) < self.num_blocks:
            return ids
        return [self._check_id(b) for b in ids]

    def _check_id(self, block_id: object) -> int:
        if type(block_id) is int and 0 <= block_id < self.num_blocks:
            return block_id  # the common case, first
        number = as_int(block_id)
        if number is None:
            raise InvalidBlock(f"block ids are ints, got {block_id!r}.")
        if not 0 <= number < self.num_blocks:
            raise InvalidBlock(
                f"block {block_id} does not belong to this pool (ids are 0..{self.num_blocks - 1})."
            )
        return number

    def __repr__(self) -> str:
        pages = f", {self.num_pages} pages" if self.blocks_per_page else ""
        cached = f", {self.num_cached} cached" if self.num_cached else ""
        return (
            f"BlockPool({self.num_free}/{self.num_blocks} free{cached}, "
            f"block_size={self.block_size}{pages}, allocation={self.allocation!r})"
        )
