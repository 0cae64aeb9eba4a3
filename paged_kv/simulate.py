"""Replay synthetic traffic to measure where KV memory goes and how often the cache hits.

The memory-waste study of the PagedAttention paper (Kwon et al., SOSP 2023, Fig. 2): the
same requests run through contiguous reservation (to the maximum length, to a power of two,
to the exact length an oracle knows) and through paged blocks, under one memory budget.
Then block-access traces replayed through eviction policies, against Belady's optimum.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from paged_kv.block_pool import BlockPool
from paged_kv.block_table import blocks_needed
from paged_kv.errors import InvalidArgument, require_positive_int
from paged_kv.eviction import EvictionPolicy, make_policy
from paged_kv.manager import KVCacheManager

Scheme = Literal["max", "pow2", "oracle", "paged"]
SCHEMES: tuple[Scheme, ...] = ("max", "pow2", "oracle", "paged")

# Share of KV memory holding real token states, as reported in Fig. 2 of the paper
# (Orca with three reservation rules, and vLLM).
PAPER_TOKEN_STATE_SHARE: dict[Scheme, float] = {
    "max": 0.204,
    "pow2": 0.268,
    "oracle": 0.382,
    "paged": 0.963,
}


@dataclass(frozen=True)
class Request:
    """A request of `prompt_len` input tokens that will generate `output_len` tokens."""

    prompt_len: int
    output_len: int

    @property
    def final_len(self) -> int:
        return self.prompt_len + self.output_len


@dataclass(frozen=True)
class LengthProfile:
    """Lognormal input/output lengths with the given means (labelled synthetic, seeded)."""

    name: str
    mean_input: float
    mean_output: float
    sigma: float = 1.0


# Means from the paper's Table/Fig. 11 descriptions of the two datasets; shapes are ours.
PROFILES: dict[str, LengthProfile] = {
    "sharegpt": LengthProfile("ShareGPT-like (synthetic)", 161, 338),
    "alpaca": LengthProfile("Alpaca-like (synthetic)", 19, 58, sigma=0.8),
}


def synthetic_requests(
    profile: str, num_requests: int, *, seed: int = 0, max_len: int = 2048
) -> list[Request]:
    """Draw `num_requests` seeded requests whose lengths follow `PROFILES[profile]`.

    Lengths are lognormal with the profile's means, at least 1, and prompt + output never
    exceeds `max_len` (the output is cut to fit).
    """
    if profile not in PROFILES:
        raise InvalidArgument(f"unknown profile {profile!r}; choose one of {sorted(PROFILES)}.")
    require_positive_int("num_requests", num_requests)
    require_positive_int("max_len", max_len)
    p = PROFILES[profile]
    rng = np.random.default_rng(seed)

    def lognormal(mean: float) -> np.ndarray:
        mu = np.log(mean) - p.sigma**2 / 2  # so that E[X] = mean
        return np.maximum(1, np.rint(rng.lognormal(mu, p.sigma, num_requests))).astype(int)

    prompts = np.minimum(lognormal(p.mean_input), max_len - 1)
    outputs = np.minimum(lognormal(p.mean_output), max_len - prompts)
    return [Request(int(i), int(o)) for i, o in zip(prompts, outputs, strict=True)]


@dataclass(frozen=True)
class WasteReport:
    """Where the KV memory went, averaged over the steps when requests were waiting.

    The four shares add up to 1: token states (K/V of tokens that exist), reserved (slots
    held for tokens still to come), internal fragmentation (held slots no token will ever
    use), and external fragmentation & other free memory (free, yet the next request does
    not fit).
    """

    scheme: Scheme
    token_states: float
    reserved: float
    internal_fragmentation: float
    external_fragmentation: float
    mean_running: float
    max_running: int
    steps: int
    preemptions: int


def next_pow2(n: int) -> int:
    """Smallest power of two >= n."""
    return 1 << (n - 1).bit_length()


class _ContiguousArena:
    """First-fit allocation of contiguous token ranges in [0, capacity)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._starts: list[int] = []  # sorted starts of allocated ranges
        self._sizes: dict[int, int] = {}

    def allocate(self, size: int) -> int | None:
        """Start of a free range of `size` slots, or None when no gap is large enough."""
        prev_end = 0
        for i, start in enumerate(self._starts):
            if start - prev_end >= size:
                return self._take(i, prev_end, size)
            prev_end = start + self._sizes[start]
        if self.capacity - prev_end >= size:
            return self._take(len(self._starts), prev_end, size)
        return None

    def free(self, start: int) -> None:
        self._starts.pop(bisect.bisect_left(self._starts, start))
        del self._sizes[start]

    def _take(self, index: int, start: int, size: int) -> int:
        self._starts.insert(index, start)
        self._sizes[start] = size
        return start


def reservation(scheme: Scheme, request: Request, max_len: int) -> int:
    """Slots a contiguous scheme reserves for `request` when it is admitted."""
    if scheme == "max":
        return max_len
    if scheme == "pow2":
        return min(max_len, next_pow2(request.final_len))
    return request.final_len  # oracle


def simulate_memory_waste(
    requests: Sequence[Request],
    scheme: Scheme,
    *,
    budget_tokens: int,
    max_len: int = 2048,
    block_size: int = 16,
) -> WasteReport:
    """Serve `requests` (all queued at step 0, first come first served) under one scheme.

    Each step admits waiting requests in order while the head one fits, then every running
    request stores one more token; a request leaves after `output_len` steps. Paged requests
    run on a real `KVCacheManager`; when a block is missing, the newest request is preempted
    and queued again at the front (it will recompute its tokens).
    """
    if scheme not in SCHEMES:
        raise InvalidArgument(f"unknown scheme {scheme!r}; choose one of {SCHEMES}.")
    require_positive_int("budget_tokens", budget_tokens)
    paged = scheme == "paged"
    capacity = budget_tokens // block_size * block_size if paged else budget_tokens
    for r in requests:
        if r.final_len > max_len or r.prompt_len < 1 or r.output_len < 1:
            raise InvalidArgument(f"{r} does not fit max_len={max_len} or has empty parts.")
        need = r.final_len + block_size if paged else reservation(scheme, r, max_len)
        if need > capacity:
            raise InvalidArgument(
                f"{r} needs {need} slots under {scheme!r} but the budget is {capacity}; "
                "raise budget_tokens."
            )
    manager = (
        KVCacheManager(budget_tokens // block_size, block_size, prefix_caching=False)
        if paged
        else None
    )
    arena = None if paged else _ContiguousArena(budget_tokens)

    waiting: deque[int] = deque(range(len(requests)))
    length: dict[int, int] = {}  # running request -> tokens stored now
    held: dict[int, int] = {}  # running request -> slots it holds
    start_of: dict[int, int] = {}  # contiguous only: where its range starts
    progress: dict[int, int] = {}  # preempted request -> tokens it had (it recomputes them)
    sums = np.zeros(4)
    running_total = max_running = steps = measured = preemptions = 0

    while waiting or length:
        steps += 1
        while waiting:  # admission, first come first served
            i = waiting[0]
            r = requests[i]
            tokens = progress.get(i, r.prompt_len)
            if paged:
                if not manager.can_allocate(tokens + 1):
                    break
                manager.add_sequence(i, [0] * tokens)
                held[i] = blocks_needed(tokens, block_size) * block_size
            else:
                size = reservation(scheme, r, max_len)
                start = arena.allocate(size)
                if start is None:
                    break
                start_of[i], held[i] = start, size
            length[i] = tokens
            progress.pop(i, None)
            waiting.popleft()

        for i in list(length):  # decode: one more token for every running request
            if i not in length:
                continue  # preempted earlier in this step
            if paged:
                while i in length and not manager.can_append(i):
                    victim = next(reversed(length))  # the newest running request
                    progress[victim] = length.pop(victim)
                    del held[victim]
                    manager.free_sequence(victim)
                    waiting.appendleft(victim)
                    preemptions += 1
                if i not in length:
                    continue
                manager.append_tokens(i, [0])
                held[i] = len(manager.block_table(i)) * block_size
            length[i] += 1

        if waiting:  # the server is saturated: account for every slot
            measured += 1
            states = reserved = internal = 0
            for i, n in length.items():
                final = requests[i].final_len
                states += n
                reserved += min(held[i], final) - n
                internal += held[i] - min(held[i], final)
            sums += (states, reserved, internal, capacity - states - reserved - internal)
            running_total += len(length)
            max_running = max(max_running, len(length))

        for i in [i for i, n in length.items() if n >= requests[i].final_len]:
            if paged:
                manager.free_sequence(i)
            else:
                arena.free(start_of.pop(i))
            del length[i], held[i]

    shares = sums / (measured * capacity) if measured else np.zeros(4)
    return WasteReport(
        scheme=scheme,
        token_states=float(shares[0]),
        reserved=float(shares[1]),
        internal_fragmentation=float(shares[2]),
        external_fragmentation=float(shares[3]),
        mean_running=running_total / measured if measured else 0.0,
        max_running=max_running,
        steps=steps,
        preemptions=preemptions,
    )


def memory_waste_study(
    requests: Sequence[Request],
    *,
    budget_tokens: int,
    max_len: int = 2048,
    block_size: int = 16,
) -> list[WasteReport]:
    """Run every scheme on the same requests and budget."""
    return [
        simulate_memory_waste(
            requests, s, budget_tokens=budget_tokens, max_len=max_len, block_size=block_size
        )
        for s in SCHEMES
    ]


# -- replaying block-access traces through eviction policies -------------------------------


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


def replay_trace(
    trace: Sequence[int], capacity: int, policy: str | EvictionPolicy | type[EvictionPolicy]
) -> HitStats:
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


@dataclass(frozen=True)
class CacheFrame:
    """The cache after one access of a trace replayed through a real `BlockPool`."""

    step: int
    key: int | None  # the block key accessed (None for the empty start)
    hit: bool
    block: int | None  # the physical block that holds it
    keys: tuple[int | None, ...]  # key held by each physical block (None: free)
    counts: tuple[int, ...]  # the policy's count per block (0 without counts)


def trace_frames(
    trace: Sequence[int], capacity: int, policy: str | EvictionPolicy | type[EvictionPolicy]
) -> list[CacheFrame]:
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
    eviction: str | EvictionPolicy | type[EvictionPolicy] = "lru",
) -> PrefillStats:
    """Serve (prompt, answer) requests one after another on a prefix-caching manager.

    Each prompt is added (reusing cached blocks), its answer appended, and the sequence
    freed, so its blocks stay cached for later requests until evicted.
    """
    manager = KVCacheManager(num_blocks, block_size, eviction=eviction)
    for i, (prompt, answer) in enumerate(requests):
        manager.add_sequence(i, prompt)
        manager.append_tokens(i, answer)
        manager.free_sequence(i)
    rates = manager.hit_rates()
    return PrefillStats(rates.queried_tokens, rates.hit_tokens)
