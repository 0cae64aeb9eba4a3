"""The designs a beginner writes first. The chapters measure them, then do better.

They work on small inputs; each one's docstring names the cost that makes it a foil.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable

from paged_kv.errors import InvalidBlock, OutOfBlocks, require_positive_int
from paged_kv.eviction import EvictionPolicy

FREE, USED = False, True


class ScanBlockPool:
    """A block pool that finds free blocks by scanning a list of flags.

    Every `allocate` walks the whole pool to collect the free ids: O(pool size) per call,
    however few blocks it hands out. Same interface as `paged_kv.BlockPool`'s core.
    """

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        self.num_blocks = require_positive_int("num_blocks", num_blocks)
        self.block_size = block_size
        self.used = [FREE] * num_blocks

    @property
    def num_free(self) -> int:
        return self.used.count(FREE)

    def allocate(self, n: int = 1) -> list[int]:
        free = [i for i, used in enumerate(self.used) if used is FREE]
        if len(free) < n:
            raise OutOfBlocks(
                f"asked for {n} blocks, {len(free)} free", requested=n, available=len(free)
            )
        for i in free[:n]:
            self.used[i] = USED
        return free[:n]

    def release(self, block_ids: Iterable[int]) -> list[int]:
        ids = list(block_ids)
        for i in ids:
            if not 0 <= i < self.num_blocks or self.used[i] is FREE:
                raise InvalidBlock(f"block {i} is not in use")
        for i in ids:
            self.used[i] = FREE
        return ids


class ListLRU:
    """Least-recently-used order kept in a Python list.

    `touch` does `list.remove` and `evict` does `list.pop(0)`: both O(n) in the number of
    tracked keys, which is what an ordered dict or linked list avoids.
    """

    def __init__(self) -> None:
        self.order: list[Hashable] = []  # least recent first

    def __len__(self) -> int:
        return len(self.order)

    def __contains__(self, key: object) -> bool:
        return key in self.order

    def touch(self, key: Hashable) -> None:
        """Mark `key` as used just now (adding it if new)."""
        if key in self.order:
            self.order.remove(key)
        self.order.append(key)

    def remove(self, key: Hashable) -> None:
        """Stop tracking `key`."""
        self.order.remove(key)

    def evict(self) -> Hashable:
        """Remove and return the least recently used key."""
        if not self.order:
            raise KeyError("nothing to evict: the LRU is empty")
        return self.order.pop(0)


class HeapLFU(EvictionPolicy):
    """LFU with a heap of (count, tick, key) entries and lazy deletion.

    Every touch pushes a new entry instead of updating the old one, which stays in the heap
    as garbage until it surfaces at `evict`: the heap grows with every access, not with the
    number of cached keys, and each operation costs O(log heap size).
    """

    name = "heap-lfu"

    def __init__(self) -> None:
        self.heap: list[tuple[int, int, Hashable]] = []
        self.count: dict[Hashable, int] = {}
        self.evictable: dict[Hashable, int] = {}  # key -> tick of its live heap entry
        self.tick = 0

    def __len__(self) -> int:
        return len(self.evictable)

    def __contains__(self, key: object) -> bool:
        return key in self.evictable

    def touch(self, key: Hashable) -> None:
        self.count[key] = self.count.get(key, 0) + 1
        if key in self.evictable:
            self._push(key)

    def make_evictable(self, key: Hashable) -> None:
        self.count.setdefault(key, 0)
        self._push(key)

    def revive(self, key: Hashable) -> None:
        del self.evictable[key]  # its heap entries become garbage

    def forget(self, key: Hashable) -> None:
        self.evictable.pop(key, None)
        self.count.pop(key, None)

    def evict(self) -> Hashable:
        while self.heap:
            _count, tick, key = heapq.heappop(self.heap)
            if self.evictable.get(key) == tick:  # the live entry, not garbage
                del self.evictable[key]
                del self.count[key]
                return key
        raise self._nothing_to_evict()

    def _push(self, key: Hashable) -> None:
        self.tick += 1
        self.evictable[key] = self.tick
        heapq.heappush(self.heap, (self.count[key], self.tick, key))


class LengthKeyedPrefixCache:
    """A "prefix cache" keyed by the prompt's length, as the seed post builds it.

    Two prompts of the same length map to the same key, so the second is handed the first
    one's blocks: another prompt's KV. Wrong, not merely slow.
    """

    def __init__(self) -> None:
        self.blocks_by_length: dict[int, list[int]] = {}

    def lookup(self, token_ids: list[int]) -> list[int] | None:
        """Blocks cached for a prompt of this length, whatever its tokens."""
        return self.blocks_by_length.get(len(token_ids))

    def insert(self, token_ids: list[int], block_ids: list[int]) -> None:
        self.blocks_by_length[len(token_ids)] = list(block_ids)
