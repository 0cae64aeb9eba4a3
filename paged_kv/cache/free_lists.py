"""Free lists: which free block the pool hands out next, in O(1) whatever the pool size.

`FifoFreeList` recycles ids evenly; `PackedPagesFreeList` fills used pages first so whole
pages stay free and can be given back.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator


class FifoFreeList(deque[int]):
    """Free block ids in a queue: take from the front, return to the back (ids recycle evenly).

    It is the deque itself, so `take`, `put` and `len` cost one C call on the pool's hot path.
    """

    def __init__(self, num_blocks: int) -> None:
        super().__init__(range(num_blocks))

    take = deque.popleft
    put = deque.append

    def __reduce__(self) -> tuple[type[FifoFreeList], tuple[int], None, Iterator[int]]:
        """Copies and pickles rebuild it empty, then append its ids in order (the deque's own
        recipe would call `__init__` without `num_blocks`)."""
        return (FifoFreeList, (0,), None, iter(self))


class PackedPagesFreeList:
    """Free block ids grouped by page; takes from the fullest page that still has room.

    Filling used pages first keeps other pages entirely free, so they can be released.
    Pages are bucketed by how many free blocks they have, so a take scans at most
    `blocks_per_page` buckets: constant in the pool size.
    """

    def __init__(self, num_blocks: int, blocks_per_page: int) -> None:
        self._per_page = blocks_per_page
        num_pages = num_blocks // blocks_per_page
        # Each page's free ids as a stack, lowest id on top.
        self._free = [
            list(range((p + 1) * blocks_per_page - 1, p * blocks_per_page - 1, -1))
            for p in range(num_pages)
        ]
        # _partial[k] holds the pages with exactly k free blocks, 0 < k < blocks_per_page.
        self._partial: list[dict[int, None]] = [{} for _ in range(blocks_per_page)]
        self._empty = list(range(num_pages - 1, -1, -1))  # entirely free pages, page 0 on top
        self._count = num_blocks

    def __len__(self) -> int:
        return self._count

    def take(self) -> int:
        page = self._take_page()
        block_id = self._free[page].pop()
        left = len(self._free[page])
        if left:
            self._partial[left][page] = None
        self._count -= 1
        return block_id

    def put(self, block_id: int) -> None:
        page = block_id // self._per_page
        before = len(self._free[page])
        self._free[page].append(block_id)
        if before:
            del self._partial[before][page]
        if before + 1 == self._per_page:
            self._empty.append(page)
        else:
            self._partial[before + 1][page] = None
        self._count += 1

    def _take_page(self) -> int:
        """Remove and return the fullest page with a free block (an empty page if none)."""
        for free in range(1, self._per_page):
            if self._partial[free]:
                return self._partial[free].popitem()[0]
        return self._empty.pop()
