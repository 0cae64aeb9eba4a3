"""Block-access traces replayed through eviction policies, against Belady's offline optimum.

`replay_trace` counts hits of a policy, `belady_hits` the most any policy could get,
`trace_frames` records a real `BlockPool` at every access for the replay widget.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from paged_kv.cache.block_pool import BlockPool
from paged_kv.cache.eviction import PolicySpec, make_policy
from paged_kv.cache.manager import KVCacheManager
from paged_kv.cache.prefix_index import PrefixIndexName
from paged_kv.errors import InvalidArgument
from paged_kv.validation import require_positive_int


@dataclass(frozen=True)
class HitStats:
    """Hits and misses of one replay."""

    policy: str
    capacity: int
    hits: int
    misses: int

    @property
    def hit_rate(self) -> float:
        return self.hits / (self.hits + self.misses) if self.hits + self.misses else 0.0


def replay_trace(trace: Sequence[int], capacity: int, policy: PolicySpec) -> HitStats:
    """Run `trace` through a cache of `capacity` blocks managed by `policy`.

    A hit touches the block; a miss evicts the policy's victim when the cache is full, then
    brings the block in. Every cached block is evictable (no request holds it).
    """
    require_positive_int("capacity", capacity)
    chosen = make_policy(policy)
    hits = 0
    for key in trace:
        if key in chosen:
            hits += 1
            chosen.touch(key)
            continue
        if len(chosen) >= capacity:
            chosen.evict()
        chosen.touch(key)
        chosen.make_evictable(key)
    return HitStats(chosen.name, capacity, hits, len(trace) - hits)


def serve_requests(
    trace: Sequence[int], request_starts: Sequence[int], capacity: int, policy: PolicySpec
) -> HitStats:
    """`replay_trace` as the manager serves it: request by request, released last block first.

    A request takes its cached blocks into use (a hit: `revive`, `touch`) and brings its missed
    ones in, evicting a candidate when the cache is full; none of its blocks can be evicted
    while it runs. When it ends it releases them last first, as `free_sequence` (and vLLM)
    does, so its tail goes before its head. A request larger than the whole cache releases its
    oldest blocks early. `request_starts[0]` must be 0 (`RatedTrace.request_starts`).
    """
    require_positive_int("capacity", capacity)
    if list(request_starts[:1]) != [0] or any(b <= a for a, b in pairwise(request_starts)):
        raise InvalidArgument(
            "request_starts must start at 0 and rise: where each request starts in the trace "
            f"(RatedTrace.request_starts), got {list(request_starts[:5])}..."
        )
    chosen = make_policy(policy)
    hits, cached = 0, 0
    ends = [*request_starts[1:], len(trace)]
    for start, end in zip(request_starts, ends, strict=True):
        held: dict[int, None] = {}  # this request's blocks, in order of first use
        for key in trace[start:end]:
            if key in held:
                hits += 1
            elif key in chosen:
                hits += 1
                chosen.revive(key)
                chosen.touch(key)
            else:
                if cached >= capacity:
                    if not len(chosen):  # the request fills the cache: its oldest block goes
                        oldest = next(iter(held))
                        del held[oldest]
                        chosen.make_evictable(oldest)
                    chosen.evict()
                    cached -= 1
                chosen.touch(key)
                cached += 1
            held[key] = None
        for key in reversed(held):
            chosen.make_evictable(key)
    return HitStats(chosen.name, capacity, hits, len(trace) - hits)


def belady_hits(trace: Sequence[int], capacity: int) -> HitStats:
    """Belady's optimal offline policy: on a miss, evict the block used furthest in the future.

    No policy that must bring every missed block in can hit more often. O(n log n): the next
    use of every position comes from one backward pass, and cached blocks wait in a max-heap
    keyed by next use (entries made stale by a later hit are skipped when they surface).
    """
    require_positive_int("capacity", capacity)
    never = len(trace)
    next_use = [never] * len(trace)
    seen: dict[int, int] = {}
    for t in range(len(trace) - 1, -1, -1):
        next_use[t] = seen.get(trace[t], never)
        seen[trace[t]] = t
    cached: dict[int, int] = {}  # block -> its next use
    heap: list[tuple[int, int]] = []  # (-next use, block)
    hits = 0
    for t, key in enumerate(trace):
        if key in cached:
            hits += 1
        elif len(cached) >= capacity:
            while True:
                neg_next, victim = heapq.heappop(heap)
                if cached.get(victim) == -neg_next:
                    del cached[victim]
                    break
        cached[key] = next_use[t]
        heapq.heappush(heap, (-next_use[t], key))
    return HitStats("belady", capacity, hits, len(trace) - hits)


def perfect_lfu_hits(trace: Sequence[int], capacity: int, restarts: Sequence[int] = ()) -> HitStats:
    """LFU that never forgets: exact counts of every block ever seen, kept after eviction.

    An online policy (it only knows the past) with unbounded memory and O(log n) per access:
    a reference for how far frequency alone can take an online policy. On traces whose
    popularity does not change, no practical policy learns frequencies better, so the gap
    between it and Belady is the price of not knowing the future, not of a policy's design.
    On a miss the victim is the cached block with the lowest count (ties: least recent).
    `restarts`: positions where popularity is known to change wholesale (the phases of
    `shifting_popularity`); counts start again at each, and blocks not read since go first.
    """
    require_positive_int("capacity", capacity)
    upcoming = iter(sorted(restarts))
    restart, phase = next(upcoming, None), 0
    count: dict[int, tuple[int, int]] = {}  # block -> (phase of its last access, its count)
    last: dict[int, int] = {}  # cached block -> time of its last access
    heap: list[tuple[int, int, int, int]] = []  # (phase, count, last access, block); stale skipped
    hits = 0
    for t, key in enumerate(trace):
        while restart is not None and restart <= t:
            restart, phase = next(upcoming, None), phase + 1
        seen_in, n = count.get(key, (phase, 0))
        count[key] = (phase, n + 1 if seen_in == phase else 1)
        if key in last:
            hits += 1
        elif len(last) >= capacity:
            while True:
                p, c, when, victim = heapq.heappop(heap)
                if last.get(victim) == when and count[victim] == (p, c):
                    del last[victim]
                    break
        last[key] = t
        heapq.heappush(heap, (*count[key], t, key))
    return HitStats("perfect-lfu", capacity, hits, len(trace) - hits)


@dataclass(frozen=True)
class CacheFrame:
    """The cache after one access of a trace replayed through a real `BlockPool`."""

    step: int
    key: int | None  # the block key accessed (None for the empty start)
    hit: bool
    block: int | None  # the physical block that holds it
    keys: tuple[int | None, ...]  # key held by each physical block (None: free)
    counts: tuple[int, ...]  # the policy's count per block (0 without counts)


def trace_frames(trace: Sequence[int], capacity: int, policy: PolicySpec) -> list[CacheFrame]:
    """Replay `trace` through a `BlockPool` of `capacity` blocks; one frame per access.

    A miss allocates a block (the pool evicts through `policy` when nothing is free) and
    keeps its content; a hit shares and releases the cached block, as a request would. Hits
    match `replay_trace` for LRU and the LFUs; FIFO differs, since a block that was in use
    re-enters the queue at the back. For the replay widgets.
    """
    require_positive_int("capacity", capacity)
    block_of: dict[int, int] = {}
    key_of: dict[int, int] = {}

    def forget(block: int) -> None:
        del block_of[key_of.pop(block)]

    pool = BlockPool(capacity, eviction=policy, on_evict=forget)
    counts = getattr(pool.policy, "count", lambda _b: 0)
    frames = [CacheFrame(0, None, False, None, (None,) * capacity, (0,) * capacity)]
    for step, key in enumerate(trace, start=1):
        hit = key in block_of
        if hit:
            pool.share([block_of[key]])
        else:
            [block] = pool.allocate(1)
            block_of[key], key_of[block] = block, key
            pool.keep_content([block])
        pool.release([block_of[key]])
        frames.append(
            CacheFrame(
                step,
                key,
                hit,
                block_of[key],
                tuple(key_of.get(b) for b in range(capacity)),
                tuple(counts(b) if b in key_of else 0 for b in range(capacity)),
            )
        )
    return frames


@dataclass(frozen=True)
class PrefillStats:
    """Prompt tokens of a replay, and how many the prefix cache saved from recomputation."""

    prompt_tokens: int
    hit_tokens: int

    @property
    def saved(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def replay_requests(
    requests: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    num_blocks: int,
    block_size: int = 16,
    eviction: PolicySpec = "lru",
    prefix_index: PrefixIndexName = "hash",
) -> PrefillStats:
    """Serve (prompt, answer) requests one after another on a prefix-caching manager.

    Each prompt is added (reusing cached blocks), its answer appended, and the sequence
    freed, so its blocks stay cached for later requests until evicted. `prefix_index` is
    the manager's: "hash" (chained block hashes) or "radix" (a radix tree of tokens).
    """
    manager = KVCacheManager(num_blocks, block_size, eviction=eviction, prefix_index=prefix_index)
    for i, (prompt, answer) in enumerate(requests):
        manager.add_sequence(i, prompt)
        manager.append_tokens(i, answer)
        manager.free_sequence(i)
    rates = manager.hit_rates()
    return PrefillStats(rates.queried_tokens, rates.hit_tokens)
