"""LFU with history: a block's count outlives its eviction, so a rare prefix's comeback counts.

Plain LFU drops a count with its block. A prefix read every few thousand accesses is evicted
in between and comes back at count 1, tied with the crowd of one-off blocks (a request's own
tail) it should outrank. *Perfect LFU* (Breslau et al., INFOCOM 1999) keeps every count forever;
`HistoryLFU` keeps those of recently evicted content, in a bounded ghost keyed by content.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from paged_kv.cache.eviction import LFU
from paged_kv.errors import InvalidArgument


class HistoryLFU(LFU):
    """LFU whose evicted content leaves its count in a FIFO ghost; a comeback resumes it.

    The ghost holds at most `history` x (blocks tracked) content keys (a few dozen bytes each,
    beside the kilobytes to megabytes of K/V a block holds), trimmed when a block comes in,
    after its lookup. No aging: blocks that were popular once keep their counts (for shifting
    popularity, see `AgingLFU`, S3-FIFO or ARC). O(1) amortized: LFU's buckets and bitmask, a
    dict operation per call, ghost trims paid for by the evictions that filled the ghost.
    """

    name = "lfu-history"

    def __init__(self, history: float = 16.0, max_bucket: int = 255) -> None:
        super().__init__(max_bucket)
        if not history >= 0:
            raise InvalidArgument(
                f"history must be >= 0 (ghost keys per tracked block), got {history!r}."
            )
        self.history = history
        self._ghost: OrderedDict[Hashable, int] = OrderedDict()  # content -> count, oldest first
        self._key: dict[int, Hashable] = {}  # tracked block -> its content key

    def touch(self, block_id: int) -> None:
        if block_id not in self._count:
            self._track(block_id)
        super().touch(block_id)

    def make_evictable(self, block_id: int) -> None:
        if block_id not in self._count:
            self._track(block_id)
        super().make_evictable(block_id)

    def evict(self) -> int:
        block_id = self.peek()
        self._ghost[self._key.pop(block_id)] = self._count[block_id]
        return super().evict()

    def forget(self, block_id: int) -> None:
        super().forget(block_id)
        self._key.pop(block_id, None)

    def _track(self, block_id: int) -> None:
        """A new block: its count resumes from the ghost (0 if unknown); then trim the ghost."""
        key = self.content_key(block_id)
        self._key[block_id] = key
        self._count[block_id] = self._ghost.pop(key, 0)
        ghost, limit = self._ghost, int(self.history * len(self._count))
        while len(ghost) > limit:
            del ghost[next(iter(ghost))]
