"""S3-FIFO (Yang et al., SOSP 2023): one-hit blocks die young in a small FIFO, behind the same
`EvictionPolicy`; its ghost queue remembers evicted *content* (`content_key`), never block ids.

O(1) amortized per call: a dict or ordered-dict operation, plus loops paid for by earlier work
(reinsertions by the hits that set the counters, ghost trims by the insertions that filled it).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from paged_kv.cache.eviction import EvictionPolicy, require_fraction
from paged_kv.errors import InvalidArgument
from paged_kv.validation import require_positive_int


class S3FIFO(EvictionPolicy):
    """S3-FIFO (Yang et al., SOSP 2023): a small probationary FIFO, a main FIFO, a ghost queue.

    A new block enters the small queue S, unless its content is in the ghost queue G (evicted
    from S recently), then it enters the main queue M. A hit only bumps a 2-bit counter
    (`max_freq`=3); nothing moves. A victim comes from S while S holds at least `small_ratio`
    of the candidates: S's oldest block moves to M if it was hit (`move_threshold` times) since
    it entered, else it is evicted and its content key joins G. From M, the oldest block is
    evicted if its counter is 0, else reinserted at M's young end with the counter minus one
    (a 2-bit CLOCK). G keeps at most `ghost_ratio` x (blocks tracked) content keys, FIFO,
    trimmed when a block comes in (after looking it up).

    One-hit wonders (a request's own blocks, a scan) die in S without touching M. In a pool, a
    block in use is not in a queue: it re-enters the young end of its queue when released.
    """

    name = "s3fifo"

    def __init__(
        self,
        small_ratio: float = 0.1,
        ghost_ratio: float = 0.9,
        move_threshold: int = 1,
        max_freq: int = 3,
    ) -> None:
        self.small_ratio = require_fraction("small_ratio", small_ratio)
        if not ghost_ratio >= 0:
            raise InvalidArgument(f"ghost_ratio must be >= 0, got {ghost_ratio!r}.")
        self.ghost_ratio = ghost_ratio
        self.move_threshold = require_positive_int("move_threshold", move_threshold)
        self.max_freq = require_positive_int("max_freq", max_freq)
        self._small: OrderedDict[int, None] = OrderedDict()  # candidates in S, oldest first
        self._main: OrderedDict[int, None] = OrderedDict()  # candidates in M, oldest first
        self._ghost: OrderedDict[Hashable, None] = OrderedDict()  # content keys, oldest first
        self._freq: dict[int, int] = {}  # tracked block -> hits since it entered its queue
        self._in_main: dict[int, bool] = {}  # tracked block -> its queue is M
        self._key: dict[int, Hashable] = {}  # tracked block -> its content key

    def touch(self, block_id: int) -> None:
        freq = self._freq.get(block_id)
        if freq is None:
            self._track(block_id)
        elif freq < self.max_freq:
            self._freq[block_id] = freq + 1

    def make_evictable(self, block_id: int) -> None:
        if block_id not in self._freq:
            self._track(block_id)
        (self._main if self._in_main[block_id] else self._small)[block_id] = None

    def revive(self, block_id: int) -> None:
        del (self._main if self._in_main[block_id] else self._small)[block_id]

    def evict(self) -> int:
        if not self._small and not self._main:
            raise self._nothing_to_evict()
        if self._small and (not self._main or len(self._small) >= self.small_ratio * len(self)):
            victim = self._evict_small()
            if victim is not None:
                return victim
        return self._evict_main()

    def forget(self, block_id: int) -> None:
        if block_id in self._freq:
            (self._main if self._in_main[block_id] else self._small).pop(block_id, None)
            self._untrack(block_id)

    def queues(self) -> dict[str, list]:
        """The candidates of S and M and the ghost keys, oldest first (for views; O(n))."""
        return {"small": list(self._small), "main": list(self._main), "ghost": list(self._ghost)}

    def __len__(self) -> int:
        return len(self._small) + len(self._main)

    def __contains__(self, block_id: object) -> bool:
        return block_id in self._small or block_id in self._main

    def _track(self, block_id: int) -> None:
        key, ghost = self.content_key(block_id), self._ghost
        in_ghost = key in ghost
        if in_ghost:
            del ghost[key]
        self._in_main[block_id] = in_ghost
        self._freq[block_id] = 0
        self._key[block_id] = key
        # Trimmed here, after the lookup: the victim chosen to make room for this block may
        # have pushed out the very ghost this block is (the cache looks up before it evicts).
        limit = int(self.ghost_ratio * len(self._freq))
        while len(ghost) > limit:
            del ghost[next(iter(ghost))]

    def _untrack(self, block_id: int) -> Hashable:
        del self._freq[block_id], self._in_main[block_id]
        return self._key.pop(block_id)

    def _evict_small(self) -> int | None:
        small, freq = self._small, self._freq
        while small:
            block_id = next(iter(small))
            del small[block_id]
            if freq[block_id] >= self.move_threshold:  # hit while in S: promote to M
                freq[block_id] = 0
                self._in_main[block_id] = True
                self._main[block_id] = None
                continue
            self._ghost[self._untrack(block_id)] = None  # trimmed when a block comes in
            return block_id
        return None

    def _evict_main(self) -> int:
        main, freq = self._main, self._freq
        while True:
            block_id = next(iter(main))
            del main[block_id]
            if freq[block_id]:  # CLOCK: a second chance per remaining hit
                freq[block_id] -= 1
                main[block_id] = None
                continue
            self._untrack(block_id)
            return block_id
