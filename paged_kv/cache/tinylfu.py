"""W-TinyLFU (Caffeine's policy): a frequency sketch decides which of two blocks stays.

Admission in a KV cache. In a web cache, "admission" decides whether an object enters the cache
at all. Here a block is computed before anyone asks whether to keep it, so every freed full block
*stays cached* (`make_evictable`): while the pool has free blocks, keeping it costs nothing. What
W-TinyLFU decides is where it stands in line: its admission duel runs when a victim is needed
(the window's oldest block against main's victim, by estimated frequency) and the loser is
evicted, so a block "refused admission" is simply the next one to go. The sketch remembers
evicted *content* (`content_key`), never block ids.

O(1) amortized per call: dict operations, protected-segment demotions paid for by the
promotions, and the sketch's halving, O(width) once every `sample_factor * width` increments.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

from paged_kv.cache.eviction import EvictionPolicy, require_fraction
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
        self.window_ratio = require_fraction("window_ratio", window_ratio)
        self.protected_ratio = require_fraction("protected_ratio", protected_ratio)
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
        segment = self._segment.get(block_id) if isinstance(block_id, int) else None
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
