"""Duel: LFU with history and an ARC-like recency policy each order the candidates, each runs alone
in a shadow cache of content keys, and the one whose shadow hit more lately picks the victim.

Adaptive caching using multiple experts (Ari et al., 2002), with ghost caches as the experts' trial
runs. O(1) amortized per call: four O(1) orderings (two real, two shadows), two decayed scores, and
ghost trims paid for by the evictions that filled the ghosts.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import cast

from paged_kv.cache.eviction import LFU, EvictionPolicy
from paged_kv.errors import InvalidArgument

ListMemory = tuple[bool, int]
"""What the recency expert keeps of evicted content: was it in T2, that list's eviction number."""


class _Counts(LFU):
    """LFU's buckets over any hashable members; a first access resumes a count from a ghost."""

    def tracks(self, member: Hashable) -> bool:
        return member in self._count

    def track(self, member: Hashable, memory: int | None) -> None:
        """A first access: the count resumes at `memory` (0 if none), plus this access."""
        # LFU's buckets are typed for block ids; here they hold content keys, which they only
        # hash and compare (the reason for the three ignores of this class).
        self._count[member] = (memory or 0) + 1  # type: ignore[index]

    def victim(self) -> Hashable:
        return self.peek()

    def evict_member(self, member: Hashable) -> int:
        """Stop tracking a candidate chosen by anyone; its count, for the ghost."""
        self._leave(member)  # type: ignore[arg-type]
        return self._count.pop(member)  # type: ignore[call-overload]


class _Recency:
    """ARC's lists (Megiddo and Modha, FAST 2003), with ghost feedback from recent evictions only.

    T1 holds members seen once, T2 members seen again or back from a ghost, least recent first.
    T1 gives the victim while it holds more than `p` candidates (or T2 none). A comeback that
    was among T1's last `window` x c evictions (c: members tracked, with it) raises `p` by one
    (at most c); one among T2's last `window` x c lowers it (at least 0).
    """

    def __init__(self, window: float) -> None:
        self.window = window
        self.p = 0.0
        self._t1: OrderedDict[Hashable, None] = OrderedDict()  # candidates, least recent first
        self._t2: OrderedDict[Hashable, None] = OrderedDict()
        self._in_t2: dict[Hashable, bool] = {}  # tracked member -> it belongs to T2
        self._evictions = [0, 0]  # evictions from T1, from T2

    def tracks(self, member: Hashable) -> bool:
        return member in self._in_t2

    def track(self, member: Hashable, memory: ListMemory | None) -> None:
        """A first access; `memory` is what the ghost kept of the member's content, if anything."""
        c = len(self._in_t2) + 1
        if memory is not None:
            was_t2, number = memory
            if self._evictions[was_t2] - number <= self.window * c:
                self.p = max(0.0, self.p - 1) if was_t2 else min(float(c), self.p + 1)
        self._in_t2[member] = memory is not None

    def touch(self, member: Hashable) -> None:
        if self._in_t2[member]:
            if member in self._t2:
                self._t2.move_to_end(member)
        else:
            self._in_t2[member] = True
            if member in self._t1:
                del self._t1[member]
                self._t2[member] = None

    def make_evictable(self, member: Hashable) -> None:
        (self._t2 if self._in_t2[member] else self._t1)[member] = None

    def revive(self, member: Hashable) -> None:
        del (self._t2 if self._in_t2[member] else self._t1)[member]

    def victim(self) -> Hashable:
        if self._t1 and (len(self._t1) > self.p or not self._t2):
            return next(iter(self._t1))
        return next(iter(self._t2))

    def evict_member(self, member: Hashable) -> ListMemory:
        """Stop tracking a candidate chosen by anyone; its list and that list's eviction number."""
        was_t2 = self._in_t2.pop(member)
        del (self._t2 if was_t2 else self._t1)[member]
        self._evictions[was_t2] += 1
        return was_t2, self._evictions[was_t2]

    def forget(self, member: Hashable) -> None:
        in_t2 = self._in_t2.pop(member, None)
        if in_t2 is not None:
            (self._t2 if in_t2 else self._t1).pop(member, None)


class _Shadow:
    """One expert alone on a cache of content keys (no K/V): its decayed hits are its score."""

    def __init__(self, expert: _Counts | _Recency, history: float) -> None:
        self.expert, self.history = expert, history
        self.score = 0.0
        self._ghost: OrderedDict[Hashable, object] = OrderedDict()  # content -> expert's memory
        self._size = 0

    def access(self, key: Hashable, capacity: int) -> None:
        expert = self.expert
        if expert.tracks(key):
            self.score += 1
            expert.touch(key)  # type: ignore[arg-type]  # a content key (see _Counts.track)
            return
        if self._size >= capacity:
            victim = expert.victim()
            self._ghost[victim] = expert.evict_member(victim)
            self._size -= 1
        # content keys stand for block ids in the expert's calls (see _Counts.track), and the
        # ghost holds what this expert's own evict_member returned
        expert.track(key, self._ghost.pop(key, None))  # type: ignore[arg-type]
        expert.make_evictable(key)  # type: ignore[arg-type]
        self._size += 1
        while len(self._ghost) > self.history * capacity:
            del self._ghost[next(iter(self._ghost))]


class Duel(EvictionPolicy):
    """Two experts order the candidates; the one whose shadow cache hits more lately evicts.

    The frequency expert is LFU with history (as `HistoryLFU`: counts outlive eviction), strong
    while popularity holds still; the recency expert is ARC-like (`_Recency`), strong when it
    shifts and for chats. Each also runs alone in a shadow cache of content keys as large as the
    most blocks ever tracked at once, where every touch is an access. A shadow hit adds 1 to its
    expert's score; every access first multiplies both scores by 1 - 1/(`horizon` x that size).
    `evict` takes the victim of the expert with the higher score (ties: frequency); both experts
    record it in one ghost keyed by content (at most `history` x tracked keys, FIFO, trimmed when
    a block comes in): a comeback resumes its count and, if it was among the last `history`/2 x
    tracked evictions, enters T2 and tells the recency expert which list lost it. A touch or
    `make_evictable` of an untracked block is its first access. Metadata: about four times
    `HistoryLFU`'s (two shadows), still bytes per block beside its kilobytes of K/V.
    """

    name = "duel"

    def __init__(
        self, history: float = 16.0, window: float = 0.25, horizon: float = 8.0,
        max_bucket: int = 255,
    ) -> None:  # fmt: skip
        if not history >= 0:
            raise InvalidArgument(f"history must be >= 0 (ghost keys per block), got {history!r}.")
        if not window > 0:
            raise InvalidArgument(f"window must be > 0 (share of tracked blocks), got {window!r}.")
        if not horizon > 0:
            raise InvalidArgument(f"horizon must be > 0 (in cache sizes), got {horizon!r}.")
        self.history, self.window, self.horizon = history, window, horizon
        self._frequency = _Counts(max_bucket)
        self._recency = _Recency(window)
        self._shadows = (
            _Shadow(_Counts(max_bucket), history),
            _Shadow(_Recency(window), history),
        )
        self._ghost: OrderedDict[Hashable, tuple[int, ListMemory, int]] = OrderedDict()
        self._key: dict[int, Hashable] = {}  # tracked block -> its content key
        self._capacity = 0  # the most blocks ever tracked at once
        self._evictions = 0

    def count(self, block_id: int) -> int:
        """The frequency expert's count of the block (0 if untracked)."""
        return self._frequency.count(block_id)

    def leader(self) -> str:
        """The expert that would choose a victim now: "frequency" or "recency"."""
        frequency, recency = self._shadows
        return "frequency" if frequency.score >= recency.score else "recency"

    def touch(self, block_id: int) -> None:
        key = self._key.get(block_id)
        if key is None:
            self._track(block_id)
            return
        self._frequency.touch(block_id)
        self._recency.touch(block_id)
        self._access(key)

    def make_evictable(self, block_id: int) -> None:
        if block_id not in self._key:
            self._track(block_id)
        self._frequency.make_evictable(block_id)
        self._recency.make_evictable(block_id)

    def revive(self, block_id: int) -> None:
        self._frequency.revive(block_id)
        self._recency.revive(block_id)

    def evict(self) -> int:
        if not len(self._frequency):
            raise self._nothing_to_evict()
        expert = self._frequency if self.leader() == "frequency" else self._recency
        block_id = cast(int, expert.victim())
        count, lists = self._frequency.evict_member(block_id), self._recency.evict_member(block_id)
        self._evictions += 1
        self._ghost[self._key.pop(block_id)] = (count, lists, self._evictions)
        return block_id

    def forget(self, block_id: int) -> None:
        self._frequency.forget(block_id)
        self._recency.forget(block_id)
        self._key.pop(block_id, None)

    def __len__(self) -> int:
        return len(self._frequency)

    def __contains__(self, block_id: object) -> bool:
        return block_id in self._frequency

    def _track(self, block_id: int) -> None:
        """A new block's first access: both experts resume what the ghost kept of its content."""
        key = self.content_key(block_id)
        self._key[block_id] = key
        self._capacity = max(self._capacity, len(self._key))
        count, lists, when = self._ghost.pop(key, (None, None, 0))
        if self._evictions - when > self.history / 2 * len(self._key):
            lists = None  # the recency expert remembers half as far back
        self._frequency.track(block_id, count)
        self._recency.track(block_id, lists)
        ghost, limit = self._ghost, int(self.history * len(self._key))
        while len(ghost) > limit:
            del ghost[next(iter(ghost))]
        self._access(key)

    def _access(self, key: Hashable) -> None:
        keep = 1 - 1 / (self.horizon * self._capacity)
        for shadow in self._shadows:
            shadow.score *= keep
            shadow.access(key, self._capacity)
