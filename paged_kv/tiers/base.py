"""The one interface every tier below the device pool has, and what tiers share.

A tier stores blobs (bytes) under block keys. It answers: how many leading keys of a run are
present, get many, put many (one result per key), delete, stats. A tier never raises for an
I/O failure: a failed read is a miss, a failed write is a `False` in the results, and the
failure is counted, so the engine can always fall back to recomputing.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from paged_kv.cache.eviction import PolicySpec, make_policy
from paged_kv.errors import InvalidArgument
from paged_kv.tiers.codec import MAX_BLOB_BYTES
from paged_kv.validation import require_positive_int


def check_max_bytes(max_bytes: object) -> int:
    """The bound `get_many` reads a blob up to: `max_bytes` (an int >= 1) or, for None,
    `codec.MAX_BLOB_BYTES`; anything else is `InvalidArgument`."""
    return MAX_BLOB_BYTES if max_bytes is None else require_positive_int("max_bytes", max_bytes)


Key = str
TIER_NAMES = ("host", "disk", "remote")  # the labels the metrics use, fastest first


class Recorder:
    """Where tiers report operations; the default records nothing. `TierMetrics` (Prometheus)
    implements the same methods."""

    def op(
        self, tier: str, op: str, result: str, count: int = 1, seconds: float | None = None
    ) -> None:
        """`count` keys of operation `op` ended with `result` (ok, miss, error, dropped...)."""

    def moved(self, tier: str, direction: str, nbytes: int) -> None:
        """`nbytes` were read from (`direction="read"`) or written to the tier."""

    def evicted(self, tier: str, count: int) -> None:
        """The tier evicted `count` blocks to make room."""

    def corrupt(self, tier: str, reason: str) -> None:
        """A blob from the tier failed verification."""

    def usage(self, tier: str, blocks: int | None, nbytes: int | None) -> None:
        """The tier holds `blocks` blocks in `nbytes` bytes now (None: unknown)."""

    def up(self, tier: str, is_up: bool) -> None:
        """The tier is usable (True) or cut off by its circuit breaker (False)."""

    def queue_depth(self, tier: str, depth: int) -> None:
        """Writes waiting in the tier's background queue."""

    def admitted(self, sources: dict[str, int]) -> None:
        """One admission: prompt tokens by source (computed, device, host, disk, remote)."""


NULL_RECORDER = Recorder()


@dataclass(frozen=True)
class TierStats:
    """A tier's counters: operations by (op, result), bytes moved, evictions, corrupt blobs."""

    name: str
    blocks: int | None
    used_bytes: int | None
    capacity_bytes: int | None
    up: bool
    operations: dict[tuple[str, str], int] = field(default_factory=dict)
    bytes_read: int = 0
    bytes_written: int = 0
    evictions: int = 0
    corrupt: int = 0

    def count(self, op: str, result: str) -> int:
        return self.operations.get((op, result), 0)


class Tier(ABC):
    """A store of blobs under block keys. Subclasses implement the five operations."""

    def __init__(self, name: str) -> None:
        if name not in TIER_NAMES:
            raise InvalidArgument(f"a tier is named one of {TIER_NAMES}, got {name!r}.")
        self.name = name
        self.recorder: Recorder = NULL_RECORDER
        self._counts: Counter[tuple[str, str]] = Counter()
        self._moved = {"read": 0, "write": 0}
        self._evictions = 0
        self._corrupt = 0
        self._stats_lock = threading.Lock()

    # -- the interface ---------------------------------------------------------------------

    @abstractmethod
    def count_leading(self, keys: Sequence[Key]) -> int:
        """How many of `keys`, from the first on, are present (stops at the first absent)."""

    @abstractmethod
    def get_many(self, keys: Sequence[Key], max_bytes: int | None = None) -> list[bytes | None]:
        """The blob of each key, None where absent or unreadable. `max_bytes` is the most a
        blob of these keys can hold (the store passes its fingerprint's `max_blob_bytes`;
        None: `codec.MAX_BLOB_BYTES`): a tier that reads from outside the process refuses a
        longer one without reading it whole, counts it as corrupt ("size") and deletes it."""

    @abstractmethod
    def put_many(self, items: Sequence[tuple[Key, bytes]]) -> list[bool]:
        """Store each (key, blob); True where it is stored now (or was already)."""

    @abstractmethod
    def delete(self, keys: Sequence[Key]) -> int:
        """Remove `keys`; return how many were present."""

    @abstractmethod
    def usage(self) -> tuple[int | None, int | None]:
        """(blocks held, bytes used); None where the tier cannot say cheaply."""

    @property
    def capacity_bytes(self) -> int | None:
        return None

    @property
    def is_up(self) -> bool:
        """False while the tier is cut off (a remote tier's circuit breaker is open)."""
        return True

    def close(self) -> None:  # noqa: B027 - most tiers hold nothing to release
        """Release connections and files."""

    def stats(self) -> TierStats:
        blocks, used = self.usage()
        with self._stats_lock:
            return TierStats(
                self.name,
                blocks,
                used,
                self.capacity_bytes,
                self.is_up,
                dict(self._counts),
                self._moved["read"],
                self._moved["write"],
                self._evictions,
                self._corrupt,
            )

    # -- bookkeeping shared by the tiers and the store -------------------------------------

    def record(self, op: str, result: str, count: int = 1, seconds: float | None = None) -> None:
        if count <= 0:
            return
        with self._stats_lock:
            self._counts[(op, result)] += count
        self.recorder.op(self.name, op, result, count, seconds)

    def record_results(self, op: str, results: Sequence[bool], seconds: float) -> None:
        """Count per-key outcomes of one timed call: ok for True, `miss` (gets) or `error`."""
        hits = sum(1 for r in results if r)
        failed = "miss" if op in ("get", "contains") else "error"
        self.record(op, "ok", hits, seconds)
        self.record(op, failed, len(results) - hits)

    def record_moved(self, direction: str, nbytes: int) -> None:
        if nbytes:
            with self._stats_lock:
                self._moved[direction] += nbytes
            self.recorder.moved(self.name, direction, nbytes)

    def record_evictions(self, count: int) -> None:
        if count:
            with self._stats_lock:
                self._evictions += count
            self.recorder.evicted(self.name, count)

    def record_corrupt(self, reason: str) -> None:
        with self._stats_lock:
            self._corrupt += 1
        self.recorder.corrupt(self.name, reason)

    def report_usage(self) -> None:
        self.recorder.usage(self.name, *self.usage())

    def __repr__(self) -> str:
        blocks, used = self.usage()
        return f"{type(self).__name__}({self.name}: {blocks} blocks, {used} bytes)"


class BudgetIndex:
    """Which keys a bounded tier holds, how many bytes, and which to evict: an
    `EvictionPolicy` from chapter 03 over slot numbers, one per key.

    `insert` takes a run in chain order and enters it tail first, and `touch` refreshes a
    run tail first too, so the policy's recency puts the head of a prefix last in line:
    when room is needed the tail blocks go first (a prefix hit needs the head blocks; a tail
    without its head is useless).
    """

    def __init__(self, capacity_bytes: int | None, eviction: PolicySpec = "lru") -> None:
        self.capacity = (
            None if capacity_bytes is None else require_positive_int("capacity", capacity_bytes)
        )
        self.policy = make_policy(eviction)
        self._slot: dict[Key, int] = {}
        self._key_of: dict[int, Key] = {}
        self._size: dict[Key, int] = {}
        self._next_slot = 0
        self.used = 0

    def __contains__(self, key: object) -> bool:
        return key in self._slot

    def __len__(self) -> int:
        return len(self._slot)

    def size_of(self, key: Key) -> int | None:
        return self._size.get(key)

    def fits(self, nbytes: int) -> bool:
        return self.capacity is None or nbytes <= self.capacity

    def insert(self, items: Sequence[tuple[Key, int]]) -> list[Key]:
        """Add (key, size) entries of one run (chain order); return the keys evicted to make
        room, which the caller must delete. Entries larger than the whole budget are skipped
        by the caller (check `fits`). A key given twice counts once, at its first place, and
        a key evicted to make room (one of this run held before, not refreshed yet) is not
        entered again in the same call: every returned key is absent afterwards."""
        evicted: list[Key] = []
        gone: set[Key] = set()
        for key, size in reversed(list(dict(items).items())):
            if key in gone:
                continue
            if key in self._slot:
                self._refresh(key)
                continue
            while self.capacity is not None and self.used + size > self.capacity and self._slot:
                victim = self._key_of[self.policy.evict()]
                self._drop(victim)
                evicted.append(victim)
                gone.add(victim)
            slot = self._next_slot
            self._next_slot += 1
            self._slot[key], self._key_of[slot], self._size[key] = slot, key, size
            self.used += size
            self.policy.touch(slot)
            self.policy.make_evictable(slot)
        return evicted

    def touch(self, keys: Sequence[Key]) -> None:
        """The keys of a run were read: refresh them, tail first."""
        for key in reversed(keys):
            if key in self._slot:
                self._refresh(key)

    def remove(self, key: Key) -> bool:
        if key not in self._slot:
            return False
        self.policy.forget(self._slot[key])
        self._drop(key)
        return True

    def keys(self) -> list[Key]:
        return list(self._slot)

    def _refresh(self, key: Key) -> None:
        slot = self._slot[key]
        self.policy.revive(slot)  # a hit takes and releases a reference, as in the pool
        self.policy.touch(slot)
        self.policy.make_evictable(slot)

    def _drop(self, key: Key) -> None:
        slot = self._slot.pop(key)
        del self._key_of[slot]
        self.used -= self._size.pop(key)
