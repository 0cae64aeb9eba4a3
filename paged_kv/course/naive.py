"""The designs a beginner writes first. The chapters measure them, then do better.

They work on small inputs; each one's docstring names the cost that makes it a foil.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from paged_kv.errors import InvalidBlock, OutOfBlocks, require_positive_int

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
