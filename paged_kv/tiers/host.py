"""The host-memory tier: blobs in a dict under a byte budget, evicted by a chapter-03 policy.

The first tier below the device pool (CPU RAM beside a GPU; here, beside the CPU pool too).
Writes go through to it synchronously; it is the fastest place to find a block the device
pool has evicted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from paged_kv.cache.eviction import PolicySpec
from paged_kv.errors import InvalidArgument
from paged_kv.tiers.base import BudgetIndex, Key, Tier, check_max_bytes


class HostTier(Tier):
    """Up to `capacity_bytes` of blobs in memory; `eviction` ("lru", "lfu", "lfu-aging",
    "fifo" or a policy) picks victims, tails of runs first."""

    def __init__(self, capacity_bytes: int, *, eviction: PolicySpec = "lru") -> None:
        super().__init__("host")
        self._index = BudgetIndex(capacity_bytes, eviction)
        self._data: dict[Key, bytes] = {}
        self._lock = threading.Lock()

    @property
    def capacity_bytes(self) -> int | None:
        return self._index.capacity

    def count_leading(self, keys: Sequence[Key]) -> int:
        n = 0
        with self._lock:
            for key in keys:
                if key not in self._data:
                    break
                n += 1
        return n

    def get_many(self, keys: Sequence[Key], max_bytes: int | None = None) -> list[bytes | None]:
        """The blobs in memory; `max_bytes` is checked but bounds nothing here: this process
        wrote every blob it holds (the store verifies them as it verifies any tier's)."""
        check_max_bytes(max_bytes)
        began = time.perf_counter()
        with self._lock:
            blobs = [self._data.get(k) for k in keys]
            self._index.touch([k for k, b in zip(keys, blobs, strict=True) if b is not None])
        self.record_results("get", [b is not None for b in blobs], time.perf_counter() - began)
        self.record_moved("read", sum(len(b) for b in blobs if b is not None))
        return blobs

    def put_many(self, items: Sequence[tuple[Key, bytes]]) -> list[bool]:
        began = time.perf_counter()
        for key, blob in items:
            if not isinstance(key, str) or not isinstance(blob, bytes):
                raise InvalidArgument(
                    f"a tier stores (key, blob) pairs of str and bytes, got "
                    f"({type(key).__name__}, {type(blob).__name__}); make blobs with encode_blob."
                )
        with self._lock:
            batch = dict(items)  # a key twice in one batch is one block
            fitting = [(k, b) for k, b in batch.items() if self._index.fits(len(b))]
            fresh = [(k, b) for k, b in fitting if k not in self._data]
            evicted = self._index.insert([(k, len(b)) for k, b in fitting])
            for key in evicted:
                self._data.pop(key, None)  # a fresh key evicted at once was never stored
            fresh = [(k, b) for k, b in fresh if k in self._index]
            self._data.update(fresh)
            results = [k in self._data for k, _ in items]
        self.record_results("put", results, time.perf_counter() - began)
        self.record_moved("write", sum(len(b) for _, b in fresh))
        self.record_evictions(len(evicted))
        self.report_usage()
        return results

    def delete(self, keys: Sequence[Key]) -> int:
        with self._lock:
            removed = [k for k in keys if self._index.remove(k)]
            for key in removed:
                del self._data[key]
        self.record("delete", "ok", len(removed))
        self.report_usage()
        return len(removed)

    def usage(self) -> tuple[int, int]:
        return len(self._data), self._index.used

    def stored_keys(self) -> list[Key]:
        with self._lock:
            return list(self._data)
