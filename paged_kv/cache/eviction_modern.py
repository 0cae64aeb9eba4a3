"""Modern eviction policies: S3-FIFO, W-TinyLFU and ARC, behind the same `EvictionPolicy`.

Each of them remembers something about blocks it no longer holds (a ghost queue, a frequency
sketch, ghost lists), and that memory is keyed by *content* (`content_key`, the block hash when
a prefix index is bound), never by block id: an evicted block id comes back with other content.

Admission in a KV cache. In a web cache, "admission" decides whether an object enters the cache
at all. Here a block is computed before anyone asks whether to keep it, so every freed full block
*stays cached* (`make_evictable`): while the pool has free blocks, keeping it costs nothing. What
these policies decide is where it stands in line. W-TinyLFU's admission duel runs when a victim
is needed: the oldest block of the window is compared with main's victim by estimated frequency,
and the loser is evicted, so a block "refused admission" is simply the next one to go. S3-FIFO's
small queue is the same idea (a block must be hit there to reach main), and ARC's T1 list is too.

Costs: every call is O(1) amortized. A dict or ordered-dict operation per call, plus loops that
pay for earlier work (S3-FIFO's reinsertions are paid by the hits that set the bits, ghost trims
by the insertions that filled the ghosts, protected-segment demotions by the promotions), plus the
sketch's periodic halving, O(width) once every `sample_factor * width` increments.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from paged_kv.cache.eviction import EvictionPolicy
from paged_kv.errors import InvalidArgument
from paged_kv.validation import require_positive_int

_M64 = (1 << 64) - 1
_SEED = 0x9E3779B97F4A7C15


def key_hash64(key: Hashable) -> int:
    """A 64-bit hash of a content key, the same in every process for ints and bytes.

    Block hashes (SHA-256 digests) are already uniform: their first 8 bytes. Anything else is
    mixed by hashing it in a tuple with a seed (CPython's tuple hash, xxHash-based, is the
    same in every process for ints; for str keys it follows PYTHONHASHSEED)."""
    if type(key) is bytes and len(key) >= 8:
        return int.from_bytes(key[:8], "little")
    return hash((key, _SEED)) & _M64


def _require_ratio(name: str, value: float) -> float:
    if not 0 < value < 1:
        raise InvalidArgument(f"{name} must be a fraction strictly between 0 and 1, got {value!r}.")
    return value


# -- S3-FIFO --------------------------------------------------------------------------------


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
        self.small_ratio = _require_ratio("small_ratio", small_ratio)
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


# -- W-TinyLFU ------------------------------------------------------------------------------


class FrequencySketch:
    """TinyLFU's frequency estimate: a doorkeeper, a count-min sketch, periodic halving.

    `depth` rows of counters capped at 15 (4 bits' worth), `width_factor` x capacity of them
    per row (Caffeine's sketch has 16 counters per cached entry in all, as here with 4 rows of
    4). The *doorkeeper* is a Bloom filter (two hashes, a bit per slot, one slot per sample)
    in front of it: a key's first occurrence only sets its doorkeeper bits, so the crowd of
    keys seen once never reaches the counters. The estimate is the minimum of the key's
    counters, plus one if the doorkeeper has seen it. Every `sample_size` = `sample_factor` x
    capacity increments, all counters are halved and the doorkeeper cleared (*reset*): old
    popularity fades. The sketch grows (doubling; counts start over) with the cache it serves.
    """

    depth = 4  # rows (unrolled in increment and estimate)
    max_count = 15
    width_factor = 4

    def __init__(self, capacity: int = 16, sample_factor: int = 10) -> None:
        self.sample_factor = require_positive_int("sample_factor", sample_factor)
        self.resets = 0
        self._resize(require_positive_int("capacity", capacity))

    def ensure_capacity(self, capacity: int) -> None:
        """Grow the sketch for a cache of `capacity` blocks (amortized O(1): it doubles)."""
        if capacity > self.capacity:
            self._resize(max(capacity, 2 * self.capacity))

    def increment(self, key: Hashable) -> None:
        h = key_hash64(key)
        h1, h2 = h & 0xFFFFFFFF, (h >> 32) | 1
        door, dmask = self._door, self._door_mask
        d1, d2 = h1 & dmask, (h2 >> 1) & dmask
        bit1, bit2 = 1 << (d1 & 7), 1 << (d2 & 7)
        if door[d1 >> 3] & bit1 and door[d2 >> 3] & bit2:
            rows, width, mask = self._rows, self.width, self.mask
            for slot in (
                h1 & mask,
                width + ((h1 + h2) & mask),
                2 * width + ((h1 + 2 * h2) & mask),
                3 * width + ((h1 + 3 * h2) & mask),
            ):
                if rows[slot] < 15:
                    rows[slot] += 1
        else:  # first sighting since the last reset: the doorkeeper only
            door[d1 >> 3] |= bit1
            door[d2 >> 3] |= bit2
        self._additions += 1
        if self._additions >= self.sample_size:
            self.reset()

    def estimate(self, key: Hashable) -> int:
        h = key_hash64(key)
        h1, h2 = h & 0xFFFFFFFF, (h >> 32) | 1
        rows, width, mask = self._rows, self.width, self.mask
        count = min(
            rows[h1 & mask],
            rows[width + ((h1 + h2) & mask)],
            rows[2 * width + ((h1 + 2 * h2) & mask)],
            rows[3 * width + ((h1 + 3 * h2) & mask)],
        )
        door, dmask = self._door, self._door_mask
        d1, d2 = h1 & dmask, (h2 >> 1) & dmask
        return count + (door[d1 >> 3] >> (d1 & 7) & door[d2 >> 3] >> (d2 & 7) & 1)

    def reset(self) -> None:
        """Halve every counter, clear the doorkeeper (one C-speed pass over the arrays)."""
        self._rows = self._rows.translate(_HALVE)
        self._door = bytearray(len(self._door))
        self._additions //= 2
        self.resets += 1

    def _resize(self, capacity: int) -> None:
        self.capacity = capacity
        width = 1 << max(4, (self.width_factor * capacity - 1).bit_length())
        self.width, self.mask = width, width - 1
        self.sample_size = self.sample_factor * capacity
        self._rows = bytearray(self.depth * width)
        door_bits = 1 << max(6, (self.sample_size - 1).bit_length())
        self._door, self._door_mask = bytearray(door_bits // 8), door_bits - 1
        self._additions = 0


_HALVE = bytes(v >> 1 for v in range(256))

_WINDOW, _PROBATION, _PROTECTED = 0, 1, 2


class WTinyLFU(EvictionPolicy):
    """W-TinyLFU (Einziger, Friedman, Manes; Caffeine's policy).

    New blocks enter a small LRU *window* (`window_ratio` of the candidates). The rest is the
    *main* cache, a segmented LRU: *probation* and *protected* (at most `protected_ratio` of
    main); a hit in probation promotes a block to protected, whose overflow is demoted back.
    Every touch is counted in a `FrequencySketch`, which remembers evicted content too.

    Admission: when a victim is needed and the window is full, its oldest block (the
    candidate) duels main's victim (probation's oldest): the candidate is admitted to probation
    only if its estimated frequency is higher, and the loser is evicted. Caffeine also admits a
    warm loser at random against hash flooding; this version stays deterministic.

    Adaptive window (`adaptive=True`, Caffeine's hill climber): a 1% window refuses what is
    reused soon but only once or twice, such as a conversation's latest turn. Every sample
    (`sample_factor` x blocks tracked, touches), the hit ratio is compared with the previous
    sample's; the window's share moves by a step in the same direction if it improved, the other
    way if not; the step shrinks by 2% a sample and restarts after a jump of 5 points.
    A hit is a touch of a tracked block, a miss the first touch of a new one.
    """

    name = "w-tinylfu"
    max_window_ratio = 0.8
    step_ratio = 0.0625
    step_decay = 0.98
    restart_threshold = 0.05

    def __init__(
        self,
        window_ratio: float = 0.01,
        protected_ratio: float = 0.8,
        sample_factor: int = 10,
        *,
        adaptive: bool = True,
    ) -> None:
        self.window_ratio = _require_ratio("window_ratio", window_ratio)
        self.protected_ratio = _require_ratio("protected_ratio", protected_ratio)
        self.sketch = FrequencySketch(sample_factor=sample_factor)
        self.adaptive = adaptive
        self._hits = self._misses = 0  # in the current sample
        self._previous_hit_ratio = 0.0
        self._step = self.step_ratio
        self._segments: tuple[OrderedDict[int, None], ...] = (
            OrderedDict(),  # window, least recent first
            OrderedDict(),  # probation
            OrderedDict(),  # protected
        )
        self._segment: dict[int, int] = {}  # tracked block -> its segment
        self._key: dict[int, Hashable] = {}  # tracked block -> its content key

    def touch(self, block_id: int) -> None:
        segment = self._segment.get(block_id)
        if segment is None:
            self._track(block_id)
            self.sketch.increment(self._key[block_id])
            self._misses += 1
            self._climb()
            return
        self.sketch.increment(self._key[block_id])
        self._hits += 1
        self._climb()
        members = self._segments[segment]
        if segment == _PROBATION:  # a hit in probation: protected from now on
            self._segment[block_id] = _PROTECTED
            if block_id in members:
                del members[block_id]
                self._segments[_PROTECTED][block_id] = None
                self._demote_overflow()
        elif block_id in members:
            members.move_to_end(block_id)

    def make_evictable(self, block_id: int) -> None:
        if block_id not in self._segment:
            self._track(block_id)
        segment = self._segment[block_id]
        self._segments[segment][block_id] = None
        if segment == _PROTECTED:
            self._demote_overflow()

    def revive(self, block_id: int) -> None:
        del self._segments[self._segment[block_id]][block_id]

    def evict(self) -> int:
        window, probation, protected = self._segments
        target = max(1, int(self.window_ratio * len(self)))
        while len(window) > target:  # filled while nothing was evicted: main had room
            block_id = next(iter(window))
            del window[block_id]
            self._segment[block_id] = _PROBATION
            probation[block_id] = None
        main = probation or protected
        if not main:
            if not window:
                raise self._nothing_to_evict()
            return self._untrack(window.popitem(last=False)[0])
        victim = next(iter(main))
        if len(window) >= target:  # the window is full: its oldest block duels main's victim
            candidate = next(iter(window))
            del window[candidate]
            estimate = self.sketch.estimate
            if estimate(self._key[candidate]) <= estimate(self._key[victim]):
                return self._untrack(candidate)  # refused: the newcomer goes
            self._segment[candidate] = _PROBATION  # admitted: main's victim goes
            probation[candidate] = None
        del main[victim]
        return self._untrack(victim)

    def forget(self, block_id: int) -> None:
        segment = self._segment.get(block_id)
        if segment is not None:
            self._segments[segment].pop(block_id, None)
            self._untrack(block_id)

    def segments(self) -> dict[str, list[int]]:
        """Candidates per segment, least recent first (for views; O(n))."""
        names = ("window", "probation", "protected")
        return {name: list(members) for name, members in zip(names, self._segments, strict=True)}

    def __len__(self) -> int:
        window, probation, protected = self._segments
        return len(window) + len(probation) + len(protected)

    def __contains__(self, block_id: object) -> bool:
        segment = self._segment.get(block_id)  # type: ignore[arg-type]
        return segment is not None and block_id in self._segments[segment]

    def _track(self, block_id: int) -> None:
        self._segment[block_id] = _WINDOW
        self._key[block_id] = self.content_key(block_id)
        self.sketch.ensure_capacity(len(self._segment))

    def _untrack(self, block_id: int) -> int:
        del self._segment[block_id], self._key[block_id]
        return block_id

    def _climb(self) -> None:
        """At the end of a sample, move the window's share toward a better hit ratio."""
        touches = self._hits + self._misses
        if not self.adaptive or touches < self.sketch.sample_factor * len(self._segment):
            return
        hit_ratio = self._hits / touches
        change = hit_ratio - self._previous_hit_ratio
        step = self._step if change >= 0 else -self._step
        self._previous_hit_ratio = hit_ratio
        self._hits = self._misses = 0
        self.window_ratio = min(self.max_window_ratio, max(0.01, self.window_ratio + step))
        self._step = step * self.step_decay
        if abs(change) >= self.restart_threshold:
            self._step = self.step_ratio if step >= 0 else -self.step_ratio

    def _demote_overflow(self) -> None:
        _, probation, protected = self._segments
        while len(protected) > self.protected_ratio * (len(probation) + len(protected)):
            block_id = next(iter(protected))
            del protected[block_id]
            self._segment[block_id] = _PROBATION
            probation[block_id] = None


# -- ARC ------------------------------------------------------------------------------------


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
