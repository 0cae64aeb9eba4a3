"""ARC (Megiddo and Modha, FAST 2003): recency and frequency lists whose split adapts to misses.

Its ghost lists remember evicted *content* (`content_key`), never block ids. O(1) amortized per
call: ordered-dict operations, plus ghost trims paid for by the insertions that filled them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from paged_kv.cache.eviction import EvictionPolicy


class ARC(EvictionPolicy):
    """Adaptive Replacement Cache (Megiddo and Modha, FAST 2003).

    T1 holds blocks seen once lately, T2 blocks seen at least twice; B1 and B2 are ghost lists
    of the content evicted from each. A new block whose content is in B1 means "T1 was too
    small": the target size `p` of T1 grows (by |B2|/|B1|, at least 1); one found in B2 shrinks
    it. Either way the block goes to T2. The victim is T1's LRU block while |T1| > p, else
    T2's. When a block comes in (after its ghost lookup), ghosts are trimmed so that
    |T1|+|B1| <= c and the total <= 2c, where c is the number of blocks tracked. Sizes of
    T1/T2 count candidates (blocks in use cannot be chosen).
    """

    name = "arc"

    def __init__(self) -> None:
        self.p = 0.0  # target number of T1 candidates
        self._t1: OrderedDict[int, None] = OrderedDict()  # candidates, LRU first
        self._t2: OrderedDict[int, None] = OrderedDict()
        self._b1: OrderedDict[Hashable, None] = OrderedDict()  # ghost content keys, LRU first
        self._b2: OrderedDict[Hashable, None] = OrderedDict()
        self._in_t2: dict[int, bool] = {}  # tracked block -> it belongs to T2
        self._key: dict[int, Hashable] = {}

    def touch(self, block_id: int) -> None:
        in_t2 = self._in_t2.get(block_id)
        if in_t2 is None:
            self._track(block_id)
        elif in_t2:
            if block_id in self._t2:
                self._t2.move_to_end(block_id)
        else:
            self._in_t2[block_id] = True
            if block_id in self._t1:
                del self._t1[block_id]
                self._t2[block_id] = None

    def make_evictable(self, block_id: int) -> None:
        if block_id not in self._in_t2:
            self._track(block_id)
        (self._t2 if self._in_t2[block_id] else self._t1)[block_id] = None

    def revive(self, block_id: int) -> None:
        del (self._t2 if self._in_t2[block_id] else self._t1)[block_id]

    def evict(self) -> int:
        t1, t2 = self._t1, self._t2
        if t1 and (len(t1) > self.p or not t2):
            block_id, ghosts = next(iter(t1)), self._b1
            del t1[block_id]
        elif t2:
            block_id, ghosts = next(iter(t2)), self._b2
            del t2[block_id]
        else:
            raise self._nothing_to_evict()
        ghosts[self._untrack(block_id)] = None  # trimmed when a block comes in
        return block_id

    def forget(self, block_id: int) -> None:
        in_t2 = self._in_t2.get(block_id)
        if in_t2 is not None:
            (self._t2 if in_t2 else self._t1).pop(block_id, None)
            self._untrack(block_id)

    def lists(self) -> dict[str, list]:
        """T1, T2 (candidates) and B1, B2 (ghost keys), LRU first (for views; O(n))."""
        return {"t1": list(self._t1), "t2": list(self._t2), "b1": list(self._b1),
                "b2": list(self._b2)}  # fmt: skip

    def __len__(self) -> int:
        return len(self._t1) + len(self._t2)

    def __contains__(self, block_id: object) -> bool:
        return block_id in self._t1 or block_id in self._t2

    def _track(self, block_id: int) -> None:
        key = self.content_key(block_id)
        b1, b2 = self._b1, self._b2
        c = len(self._in_t2) + 1
        if key in b1:  # T1 evicted it too soon: give T1 more room
            self.p = min(float(c), self.p + max(1.0, len(b2) / len(b1)))
            del b1[key]
            self._in_t2[block_id] = True
        elif key in b2:  # T2 evicted it too soon: give T2 more room
            self.p = max(0.0, self.p - max(1.0, len(b1) / len(b2)))
            del b2[key]
            self._in_t2[block_id] = True
        else:
            self._in_t2[block_id] = False
        self._key[block_id] = key
        self._trim_ghosts()

    def _untrack(self, block_id: int) -> Hashable:
        del self._in_t2[block_id]
        return self._key.pop(block_id)

    def _trim_ghosts(self) -> None:
        """After a lookup (the cache looks up before it evicts): |T1|+|B1| <= c, all <= 2c."""
        c = len(self._in_t2)
        b1, b2 = self._b1, self._b2
        while b1 and len(self._t1) + len(b1) > c:
            del b1[next(iter(b1))]
        while b1 or b2:
            if len(b1) + len(b2) + len(self) <= 2 * c:
                break
            ghosts = b2 if b2 else b1
            del ghosts[next(iter(ghosts))]
