"""Eviction policies: which cached block to drop when the pool has no free block left.

A policy sees block ids only. A block is *tracked* from its first `touch` until it is evicted
or forgotten; among tracked blocks, the *evictable* ones (ref count 0, content kept) are the
candidates. Every method is O(1): no heap, no list.remove, no scan.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from paged_kv.errors import InvalidArgument, InvalidBlock
from paged_kv.validation import require_positive_int


def require_fraction(name: str, value: float) -> float:
    """`value` if it lies strictly between 0 and 1 (a share of the candidates), else an error."""
    if not 0 < value < 1:
        raise InvalidArgument(f"{name} must be a fraction strictly between 0 and 1, got {value!r}.")
    return value


KeyOf = Callable[[int], Hashable]
"""What a block's content is called: `key_of(block_id)`, e.g. the block hash it is indexed by."""


class EvictionPolicy(ABC):
    """The interface the pool calls; subclass it to plug in your own policy."""

    name = "policy"
    key_of: KeyOf | None = None
    """Given when the policy is made (`make_policy(spec, key_of=...)`, which the manager calls
    with its prefix index's `content_key`): the content a block holds. Policies that remember
    blocks after eviction (ghost queues, frequency sketches) key that memory by content, since
    a block id is reused for other content. Without one, the block id is the key (a trace
    replay, where ids are content)."""

    def content_key(self, block_id: int) -> Hashable:
        """The key that names `block_id`'s content (see `key_of`)."""
        return block_id if self.key_of is None else self.key_of(block_id)

    @abstractmethod
    def touch(self, block_id: int) -> None:
        """The block was used (allocated, hit or read); start tracking it if new."""

    @abstractmethod
    def make_evictable(self, block_id: int) -> None:
        """The block's ref count fell to 0 and it keeps its content: a candidate now."""

    @abstractmethod
    def revive(self, block_id: int) -> None:
        """A candidate is taken back into use (a cache hit); it stays tracked."""

    @abstractmethod
    def evict(self) -> int:
        """Choose a candidate, stop tracking it, and return it (its int id: the pool refuses
        anything but a cached block with `InvalidBlock`, and then resyncs the policy)."""

    @abstractmethod
    def forget(self, block_id: int) -> None:
        """Stop tracking the block (its content is gone), whether evictable or not."""

    @abstractmethod
    def __len__(self) -> int:
        """Number of evictable blocks (for the policy's users: the pool counts its own)."""

    @abstractmethod
    def __contains__(self, block_id: object) -> bool:
        """Is the block evictable?"""

    def _nothing_to_evict(self) -> InvalidBlock:
        return InvalidBlock(
            f"{self.name}: no evictable block; blocks become evictable when their last "
            "reference is released with their content kept."
        )


class _OrderedPolicy(EvictionPolicy):
    """Candidates in one ordered dict; subclasses decide what a touch does to the order."""

    reorder_on_touch = False

    def __init__(self) -> None:
        self._order: OrderedDict[int, None] = OrderedDict()  # victim first

    def touch(self, block_id: int) -> None:
        if self.reorder_on_touch and block_id in self._order:
            self._order.move_to_end(block_id)

    def make_evictable(self, block_id: int) -> None:
        self._order[block_id] = None  # a new key: it joins at the end, the last to go

    def revive(self, block_id: int) -> None:
        del self._order[block_id]

    def evict(self) -> int:
        if not self._order:
            raise self._nothing_to_evict()
        return self._order.popitem(last=False)[0]

    def forget(self, block_id: int) -> None:
        self._order.pop(block_id, None)

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, block_id: object) -> bool:
        return block_id in self._order


class LRU(_OrderedPolicy):
    """Least recently used: the candidate whose last use is oldest goes first."""

    name = "lru"
    reorder_on_touch = True


class FIFO(_OrderedPolicy):
    """First in, first out: candidates leave in the order they became evictable."""

    name = "fifo"


class LFU(EvictionPolicy):
    """Least frequently used at block level, ties broken by recency (least recent first).

    A block's count is the number of touches since it was first tracked; it survives while
    the block keeps its content (in use or evictable) and is dropped on eviction.
    Candidates sit in frequency buckets (ordered dicts, least recent first). Buckets are
    capped at `max_bucket` (counts above it tie) so that a bitmask of non-empty buckets finds
    the lowest one with one bit trick: O(1) even though blocks re-enter the candidates with
    any count, which the classic linked list of frequencies cannot place in O(1).
    """

    name = "lfu"

    def __init__(self, max_bucket: int = 255) -> None:
        self.max_bucket = require_positive_int("max_bucket", max_bucket)
        self._count: dict[int, int] = {}
        self._buckets: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(max_bucket + 1)]
        self._bucket_of: dict[int, int] = {}  # evictable block -> its bucket
        self._nonempty = 0  # bit k set <=> bucket k holds a candidate

    def count(self, block_id: int) -> int:
        """The block's frequency (0 if untracked)."""
        return self._count.get(block_id, 0)

    def touch(self, block_id: int) -> None:
        self._set_count(block_id, self._count.get(block_id, 0) + 1)

    def make_evictable(self, block_id: int) -> None:
        self._count.setdefault(block_id, 0)
        self._enter(block_id, self._bucket(self._count[block_id]))

    def revive(self, block_id: int) -> None:
        self._leave(block_id)

    def peek(self) -> int:
        """The block `evict` would choose now: oldest in the lowest non-empty bucket."""
        if not self._nonempty:
            raise self._nothing_to_evict()
        lowest = (self._nonempty & -self._nonempty).bit_length() - 1
        return next(iter(self._buckets[lowest]))

    def evict(self) -> int:
        block_id = self.peek()
        self._leave(block_id)
        del self._count[block_id]
        return block_id

    def buckets(self) -> dict[int, list[int]]:
        """Evictable blocks by bucket, least recent first (for teaching and views; O(n))."""
        return {count: list(members) for count, members in enumerate(self._buckets) if members}

    def forget(self, block_id: int) -> None:
        if block_id in self._bucket_of:
            self._leave(block_id)
        self._count.pop(block_id, None)

    def __len__(self) -> int:
        return len(self._bucket_of)

    def __contains__(self, block_id: object) -> bool:
        return block_id in self._bucket_of

    def _set_count(self, block_id: int, count: int) -> None:
        """Change a tracked block's count; a candidate moves to its new bucket's recent end."""
        self._count[block_id] = count
        bucket = self._bucket_of.get(block_id)
        if bucket is not None:
            self._leave(block_id)
            self._enter(block_id, self._bucket(count))

    def _bucket(self, count: int) -> int:
        return min(count, self.max_bucket)

    def _enter(self, block_id: int, bucket: int) -> None:
        self._buckets[bucket][block_id] = None
        self._bucket_of[block_id] = bucket
        self._nonempty |= 1 << bucket

    def _leave(self, block_id: int) -> None:
        bucket = self._bucket_of.pop(block_id)
        members = self._buckets[bucket]
        del members[block_id]
        if not members:
            self._nonempty &= ~(1 << bucket)


class AgingLFU(LFU):
    """LFU over a sliding window: a block's count is its touches among the last `window`.

    When a touch leaves the window, its block's count drops by one, so a block that was hot
    long ago loses its lead and can be evicted; plain LFU would keep it forever. One touch
    enters and at most one leaves per call: still O(1). `window` is the memory of the policy
    in touches: a few times the number of blocks the cache holds is a good start.
    """

    name = "lfu-aging"

    def __init__(self, window: int = 4096, max_bucket: int = 255) -> None:
        super().__init__(max_bucket)
        self.window = require_positive_int("window", window)
        self._recent: deque[tuple[int, int]] = deque()  # (block, life) of recent touches
        self._life: dict[int, int] = {}  # tracked block -> which tracking period it is in
        self._lives = 0

    def touch(self, block_id: int) -> None:
        if block_id not in self._life:
            self._lives += 1
            self._life[block_id] = self._lives
        super().touch(block_id)
        self._recent.append((block_id, self._life[block_id]))
        if len(self._recent) > self.window:
            old, life = self._recent.popleft()
            if self._life.get(old) == life:  # not a touch from before an eviction
                self._set_count(old, self._count[old] - 1)

    def evict(self) -> int:
        block_id = super().evict()
        self._life.pop(block_id, None)
        return block_id

    def forget(self, block_id: int) -> None:
        super().forget(block_id)
        self._life.pop(block_id, None)


PolicySpec = str | EvictionPolicy | type[EvictionPolicy]
"""How callers name a policy: a key of `POLICIES` ("lru", "s3fifo", ...), a class or an instance."""


def _factory(module: str, class_name: str) -> Callable[..., EvictionPolicy]:
    """`make(key_of=None)`: a new `class_name` policy of `paged_kv.cache.<module>`, made with
    `key_of`; the module is imported on first use (the later policies build on this one)."""

    def make(key_of: KeyOf | None = None) -> EvictionPolicy:
        cls = getattr(importlib.import_module(f"paged_kv.cache.{module}"), class_name)
        return keyed_policy(cls, key_of)

    make.__name__ = make.__qualname__ = class_name
    return make


POLICIES: dict[str, Callable[..., EvictionPolicy]] = {
    "lru": _factory("eviction", "LRU"),
    "lfu": _factory("eviction", "LFU"),
    "lfu-aging": _factory("eviction", "AgingLFU"),
    "fifo": _factory("eviction", "FIFO"),
    "lfu-history": _factory("history_lfu", "HistoryLFU"),
    "s3fifo": _factory("s3fifo", "S3FIFO"),
    "w-tinylfu": _factory("tinylfu", "WTinyLFU"),
    "arc": _factory("arc", "ARC"),
    "duel": _factory("duel", "Duel"),
}
"""Each policy by name: `POLICIES[name](key_of=None)` makes one."""


Policy = TypeVar("Policy", bound=EvictionPolicy)


def keyed_policy(cls: type[Policy], key_of: KeyOf | None = None, **options: Any) -> Policy:
    """`cls(**options)` made with `key_of` as its content key.

    The key is in place before `cls.__init__` runs, so that any subclass gets it, even one
    whose `__init__` takes no such argument and never calls `super().__init__` (a learner's
    policy); nothing sets it afterwards."""
    policy = cls.__new__(cls)
    policy.key_of = key_of
    cls.__init__(policy, **options)
    return policy


def make_policy(policy: PolicySpec, key_of: KeyOf | None = None) -> EvictionPolicy:
    """A policy from its name (one of `POLICIES`), a class, or an instance.

    A name or a class is made with `key_of` (see `EvictionPolicy.key_of`); an instance is
    used as it was made."""
    if isinstance(policy, EvictionPolicy):
        return policy
    if isinstance(policy, type) and issubclass(policy, EvictionPolicy):
        return keyed_policy(policy, key_of)
    if isinstance(policy, str) and policy in POLICIES:
        return POLICIES[policy](key_of=key_of)
    raise InvalidArgument(
        f"unknown eviction policy {policy!r}; use one of {sorted(POLICIES)}, an "
        "EvictionPolicy subclass, or an instance of one."
    )
