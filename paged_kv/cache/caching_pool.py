"""`BlockPool`'s interface over any reference-counted pool: bring your own allocator.

The base pool only needs `allocate(n)`, `share(ids)`, `release(ids)`, `ref_count(b)` and
`num_free` (chapter 01's pool). `CachingPool` adds what chapters 03-04 need on top: blocks
whose content is kept after their last release (cached), an eviction policy choosing among
them, `on_evict`, and the counts the manager reports. It keeps a cached block by holding its
last reference in the base pool; evicting the block releases that reference, so the base pool
frees it. `KVCacheManager(..., pool=YourPool)` wraps your pool in one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from paged_kv.cache.eviction import PolicySpec, make_policy
from paged_kv.cache.snapshot import BlockInfo, BlockState, PoolSnapshot
from paged_kv.errors import InvalidBlock, OutOfBlocks
from paged_kv.validation import as_int, require_int


class RefCountedPool(Protocol):
    """What `CachingPool` asks of the pool it wraps (chapter 01's `FreeListPool` has it)."""

    @property
    def num_free(self) -> int: ...

    def allocate(self, n: int) -> list[int]: ...

    def share(self, block_ids: list[int]) -> Any: ...

    def release(self, block_ids: list[int]) -> Any: ...

    def ref_count(self, block_id: int) -> int: ...


class CachingPool:
    """Cached blocks and eviction over a plain reference-counted `base` pool.

    A block's reference count here is the base pool's, minus the one reference the cache
    holds while the block is cached. The base pool is trusted to keep its own promises
    (all-or-nothing calls, distinct ids); the checks of chapter 01 test that.
    """

    blocks_per_page = None
    allocation = "custom"

    def __init__(
        self,
        base: RefCountedPool,
        num_blocks: int,
        block_size: int,
        *,
        eviction: PolicySpec = "lru",
        on_evict: Callable[[int], None] | None = None,
    ) -> None:
        self.base = base
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.policy = make_policy(eviction)
        self.on_evict = on_evict
        self.evictions: dict[str, int] = {"allocation": 0, "reset": 0}
        self._keeps = bytearray(num_blocks)

    # -- sizes ---------------------------------------------------------------------------

    @property
    def num_pages(self) -> int:
        return 0

    @property
    def num_free(self) -> int:
        return self.base.num_free

    @property
    def num_cached(self) -> int:
        return len(self.policy)

    @property
    def num_in_use(self) -> int:
        return self.num_blocks - self.base.num_free - len(self.policy)

    @property
    def num_available(self) -> int:
        return self.base.num_free + len(self.policy)

    # -- the pool's calls ----------------------------------------------------------------

    def allocate(self, n: int = 1) -> list[int]:
        """Free blocks first; cached ones are evicted (released in the base) for the rest."""
        n = require_int("allocate's n", n)
        if n > self.num_available:
            raise OutOfBlocks(
                f"asked for {n} blocks but only {self.num_available} of {self.num_blocks} are "
                "free or evictable; release blocks or use a bigger pool.",
                requested=n,
                available=self.num_available,
            )
        short = n - self.base.num_free
        if short > 0:
            evicted = [self._drop_content(self.policy.evict(), "allocation") for _ in range(short)]
            self.base.release(evicted)
        return list(self.base.allocate(n))

    def keep_content(self, block_ids: Iterable[int]) -> None:
        ids = [self._check_id(b) for b in block_ids]
        for block_id in ids:
            if self.ref_count(block_id) == 0:
                raise InvalidBlock(
                    f"block {block_id} has no reference; only blocks in use can be kept."
                )
        for block_id in ids:
            if not self._keeps[block_id]:
                self._keeps[block_id] = 1
                self.policy.touch(block_id)

    def share(self, block_ids: Iterable[int]) -> None:
        """One more reference each: a block in use, or a cached one (a hit revives it)."""
        ids = [self._check_id(b) for b in block_ids]
        for block_id in ids:
            if self.state(block_id) is BlockState.FREE:
                raise InvalidBlock(
                    f"block {block_id} is free, so it cannot be shared; allocate it first."
                )
        for block_id in ids:
            if block_id in self.policy:
                self.policy.revive(block_id)  # the cache's reference becomes the holder's
            else:
                self.base.share([block_id])
            if self._keeps[block_id]:
                self.policy.touch(block_id)

    def release(self, block_ids: Iterable[int]) -> list[int]:
        """Drop one reference per id; a kept block's last one stays, held by the cache."""
        ids = [self._check_id(b) for b in block_ids]
        drops: dict[int, int] = {}
        for block_id in ids:
            drops[block_id] = drops.get(block_id, 0) + 1
        for block_id, times in drops.items():
            if times > self.ref_count(block_id):
                raise InvalidBlock(
                    f"block {block_id} has {self.ref_count(block_id)} reference(s) but release "
                    f"was asked to drop {times}: a double free. Release each reference once."
                )
        unreferenced = []
        for block_id in ids:
            last = self.ref_count(block_id) == 1
            if last and self._keeps[block_id]:
                self.policy.make_evictable(block_id)
            else:
                self.base.release([block_id])
            if last:
                unreferenced.append(block_id)
        return unreferenced

    # The manager's calls for its own tables: unchecked in `BlockPool`, checked as ever here.
    keep_content_unchecked = keep_content
    share_unchecked = share
    release_unchecked = release

    def discard(self, block_ids: Iterable[int]) -> None:
        """`BlockPool.discard`: these cached blocks lose their content now, uncounted."""
        ids = list(dict.fromkeys(self._check_id(b) for b in block_ids))
        for block_id in ids:
            if block_id not in self.policy:
                raise InvalidBlock(
                    f"block {block_id} is {self.state(block_id).value}; only cached blocks can "
                    "be discarded (free the sequences that hold it first)."
                )
        for block_id in ids:
            self.policy.forget(block_id)
            self._keeps[block_id] = 0
            if self.on_evict is not None:
                self.on_evict(block_id)
        self.base.release(ids)

    def evict_all_cached(self) -> int:
        count = len(self.policy)
        evicted = [self._drop_content(self.policy.evict(), "reset") for _ in range(count)]
        self.base.release(evicted)
        return count

    # -- queries -------------------------------------------------------------------------

    def ref_count(self, block_id: int) -> int:
        block_id = self._check_id(block_id)
        return self.base.ref_count(block_id) - (block_id in self.policy)

    def count_unreferenced(self, block_ids: Iterable[int]) -> int:
        """How many of these blocks have no reference (cached ones, for a prefix hit)."""
        return sum(1 for b in block_ids if self.ref_count(b) == 0)

    def is_shared(self, block_id: int) -> bool:
        return self.ref_count(block_id) > 1

    def state(self, block_id: int) -> BlockState:
        block_id = self._check_id(block_id)
        if block_id in self.policy:
            return BlockState.CACHED
        return BlockState.IN_USE if self.base.ref_count(block_id) else BlockState.FREE

    def free_pages(self) -> list[int]:
        return []

    def snapshot(self) -> PoolSnapshot:
        blocks = tuple(
            BlockInfo(block_id=b, state=self.state(b), ref_count=self.ref_count(b))
            for b in range(self.num_blocks)
        )
        return PoolSnapshot(self.block_size, None, blocks)

    def _drop_content(self, block_id: int, reason: str) -> int:
        self._keeps[block_id] = 0
        self.evictions[reason] += 1
        if self.on_evict is not None:
            self.on_evict(block_id)
        return block_id

    def _check_id(self, block_id: object) -> int:
        number = as_int(block_id)
        if number is None or not 0 <= number < self.num_blocks:
            raise InvalidBlock(
                f"block {block_id!r} does not belong to this pool (ids are 0.."
                f"{self.num_blocks - 1})."
            )
        return number

    def __repr__(self) -> str:
        return (
            f"CachingPool({self.num_free}/{self.num_blocks} free, {self.num_cached} cached, "
            f"over {type(self.base).__name__})"
        )
