"""Many engine replicas behind a router, by simulation (chapter 07).

Past one machine, a router picks the replica for each request. Cache-aware routers (SGLang's
router, llm-d, Dynamo's KV router) send a request where its prefix is already cached, within
a load bound; plain ones balance load and scatter prefixes. This seeded simulator measures the
trade-off on synthetic traffic:

- a request is a chain of block keys (equal keys mean equal prefixes, as with the chained
  block hashes of chapter 04) plus a number of output tokens;
- each replica has an LRU prefix cache of `cache_blocks` blocks and a queue of work in tokens
  that drains at `tokens_per_tick`; a request adds the prompt tokens it must compute plus its
  output tokens;
- with `shared_blocks`, every replica also writes its blocks to one shared (Redis-like) store
  of that many blocks, LRU; a prompt block missing on the replica but found there is loaded,
  not computed, for `remote_cost` of the work of computing it (0.1 by default).

Routers: `round_robin`, `least_loaded` (fewest queued tokens), and `prefix` (rendezvous
hashing of the key of the first `route_blocks` blocks, skipping any replica whose queue is
above `load_bound` times the mean, plus one request's work).
Reports: the prefix-hit rate (on the replica, and from the shared store), and the load
imbalance: each replica's queued tokens averaged over time, the largest over the mean.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from paged_kv.errors import InvalidArgument
from paged_kv.validation import require_positive_int

ROUTERS = ("round_robin", "least_loaded", "prefix")
_MASK = (1 << 64) - 1


@dataclass(frozen=True)
class ReplicaRequest:
    """One request: when it arrives (ticks), its prompt as block keys, its output length."""

    arrival: float
    blocks: tuple[int, ...]
    output_tokens: int


@dataclass(frozen=True)
class ReplicaReport:
    """What one simulated run measured."""

    workload: str
    router: str
    num_replicas: int
    shared_blocks: int
    prompt_tokens: int
    device_hit_tokens: int
    remote_hit_tokens: int
    imbalance: float  # max / mean over replicas of their time-averaged queued tokens
    mean_queued_tokens: float  # per replica, averaged over time

    @property
    def hit_rate(self) -> float:
        """Prompt tokens not computed: found on the replica or in the shared store."""
        return (self.device_hit_tokens + self.remote_hit_tokens) / max(1, self.prompt_tokens)

    @property
    def device_hit_rate(self) -> float:
        return self.device_hit_tokens / max(1, self.prompt_tokens)

    @property
    def remote_hit_rate(self) -> float:
        return self.remote_hit_tokens / max(1, self.prompt_tokens)


def _mix(x: int) -> int:
    """splitmix64: a fixed, well-spread hash of an int (never Python's `hash()`)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _arrivals(rng: np.random.Generator, n: int, rate: float) -> np.ndarray:
    return np.cumsum(rng.exponential(1.0 / rate, size=n))


def shared_prompt_workload(
    num_requests: int = 3000,
    *,
    num_prompts: int = 48,
    prompt_blocks: int = 8,
    question_blocks: int = 2,
    output_tokens: int = 64,
    alpha: float = 1.0,
    rate: float = 1.0,
    seed: int = 0,
) -> list[ReplicaRequest]:
    """Requests opening with one of `num_prompts` system prompts (Zipf-popular), then a
    question of their own; `rate` requests arrive per tick (Poisson)."""
    require_positive_int("num_requests", num_requests)
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, num_prompts + 1) ** alpha
    choices = rng.choice(num_prompts, size=num_requests, p=weights / weights.sum())
    fresh = num_prompts * prompt_blocks
    requests = []
    for t, p in zip(_arrivals(rng, num_requests, rate), choices, strict=True):
        prefix = tuple(range(int(p) * prompt_blocks, (int(p) + 1) * prompt_blocks))
        own = tuple(range(fresh, fresh + question_blocks))
        fresh += question_blocks
        requests.append(ReplicaRequest(float(t), prefix + own, output_tokens))
    return requests


def multi_turn_workload(
    num_sessions: int = 300,
    *,
    turns: int = 6,
    system_blocks: int = 2,
    turn_blocks: int = 2,
    output_blocks: int = 2,
    block_size: int = 16,
    rate: float = 1.0,
    seed: int = 0,
) -> list[ReplicaRequest]:
    """Chat sessions: turn t's prompt is the shared system prompt, every earlier turn (the
    user's blocks and the reply's) and the new user blocks. Sessions interleave."""
    require_positive_int("num_sessions", num_sessions)
    rng = np.random.default_rng(seed)
    fresh = system_blocks
    history = {s: tuple(range(system_blocks)) for s in range(num_sessions)}
    order = [s for s in range(num_sessions) for _ in range(turns)]
    rng.shuffle(order)  # sessions interleave; each session's turns stay in order
    requests = []
    for t, s in zip(_arrivals(rng, len(order), rate), order, strict=True):
        prompt = history[s] + tuple(range(fresh, fresh + turn_blocks))
        fresh += turn_blocks
        reply = tuple(range(fresh, fresh + output_blocks))
        fresh += output_blocks
        history[s] = prompt + reply
        requests.append(ReplicaRequest(float(t), prompt, output_blocks * block_size))
    return requests


WORKLOADS = {"shared prompt": shared_prompt_workload, "multi-turn": multi_turn_workload}


class _LRU:
    """Block keys with a capacity; `hits` reads the longest cached prefix."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.keys: OrderedDict[int, None] = OrderedDict()

    def run(self, blocks: Sequence[int], start: int = 0) -> int:
        n = start
        while n < len(blocks) and blocks[n] in self.keys:
            n += 1
        return n - start

    def insert(self, blocks: Sequence[int]) -> None:
        """Cache a request's blocks; its head ends most recent, so tails leave first."""
        if not self.capacity:
            return
        for key in reversed(blocks):
            self.keys[key] = None
            self.keys.move_to_end(key)
        while len(self.keys) > self.capacity:
            self.keys.popitem(last=False)


def simulate_replicas(
    requests: Sequence[ReplicaRequest],
    num_replicas: int,
    router: str,
    *,
    cache_blocks: int = 256,
    tokens_per_tick: float = 2000.0,
    block_size: int = 16,
    shared_blocks: int = 0,
    load_bound: float = 1.25,
    route_blocks: int = 4,
    remote_cost: float = 0.1,
    workload: str = "",
) -> ReplicaReport:
    """Route `requests` over `num_replicas` replicas; return what it cost and saved."""
    n = require_positive_int("num_replicas", num_replicas)
    if router not in ROUTERS:
        raise InvalidArgument(f"unknown router {router!r}; use one of {ROUTERS}.")
    if not load_bound >= 1:
        raise InvalidArgument(f"load_bound must be >= 1 (1 = perfectly even), got {load_bound}.")
    require_positive_int("route_blocks", route_blocks)
    if not 0 <= remote_cost <= 1:
        raise InvalidArgument(f"remote_cost is a share of computing a block (0..1): {remote_cost}.")
    caches = [_LRU(cache_blocks) for _ in range(n)]
    shared = _LRU(shared_blocks)
    queued = np.zeros(n)
    area = np.zeros(n)  # integral of each queue over time
    rankings: dict[int, list[int]] = {}  # rendezvous order of the replicas, per routing key
    now = 0.0
    prompt = device = remote = 0
    for i, request in enumerate(requests):
        drained = (request.arrival - now) * tokens_per_tick
        area += np.where(
            queued >= drained,
            (queued - drained / 2) * (request.arrival - now),
            queued * queued / (2 * tokens_per_tick),
        )
        queued = np.maximum(queued - drained, 0.0)
        now = request.arrival
        blocks = request.blocks
        cost = len(blocks) * block_size + request.output_tokens
        if router == "round_robin":
            r = i % n
        elif router == "least_loaded":
            r = _least_loaded(queued, i)
        else:
            key = blocks[min(route_blocks, len(blocks)) - 1]  # names the first blocks
            ranked = rankings.get(key)
            if ranked is None:
                ranked = rankings[key] = sorted(range(n), key=lambda j: _mix(key * 1_000_003 + j))
            limit = load_bound * float(queued.mean()) + cost
            r = next((j for j in ranked if queued[j] <= limit), _least_loaded(queued, i))
        cache = caches[r]
        hit = cache.run(blocks)
        loaded = shared.run(blocks, hit) if shared_blocks else 0
        computed = len(blocks) - hit - loaded
        prompt += len(blocks) * block_size
        device += hit * block_size
        remote += loaded * block_size
        queued[r] += (computed + remote_cost * loaded) * block_size + request.output_tokens
        cache.insert(blocks)
        shared.insert(blocks)
    average = area / max(now, 1e-12)
    mean = float(average.mean())
    return ReplicaReport(
        workload,
        router,
        n,
        shared_blocks,
        prompt,
        device,
        remote,
        float(average.max()) / mean if mean > 0 else 1.0,
        mean,
    )


def _least_loaded(queued: np.ndarray, turn: int) -> int:
    """The replica with the fewest queued tokens; ties go round robin (not to replica 0)."""
    order = (np.arange(len(queued)) + turn) % len(queued)
    return int(order[np.argmin(queued[order])])


def replica_study(
    replicas: Sequence[int] = (8, 16, 32, 64),
    *,
    routers: Sequence[str] = ROUTERS,
    workloads: Sequence[str] = tuple(WORKLOADS),
    shared_blocks: Sequence[int] = (0, 8192),
    utilization: float = 1.0,
    cache_blocks: int = 256,
    tokens_per_tick: float = 2000.0,
    num_requests: int = 3000,
    seed: int = 0,
) -> list[ReplicaReport]:
    """Every combination, each workload's arrival rate scaled so that it would keep
    `utilization` of the cluster busy if nothing were cached (more replicas, more traffic):
    prefix hits are what leaves the replicas room."""
    reports = []
    for name in workloads:
        if name not in WORKLOADS:
            raise InvalidArgument(f"unknown workload {name!r}; use one of {list(WORKLOADS)}.")
        probe = _workload(name, num_requests, 1.0, seed)
        work = np.mean([len(r.blocks) * 16 + r.output_tokens for r in probe])
        for n in replicas:
            rate = utilization * n * tokens_per_tick / work
            requests = _workload(name, num_requests, rate, seed)
            for router in routers:
                for shared in shared_blocks:
                    reports.append(
                        simulate_replicas(
                            requests,
                            n,
                            router,
                            cache_blocks=cache_blocks,
                            tokens_per_tick=tokens_per_tick,
                            shared_blocks=shared,
                            workload=name,
                        )
                    )
    return reports


def _workload(name: str, num_requests: int, rate: float, seed: int) -> list[ReplicaRequest]:
    if name == "multi-turn":
        return multi_turn_workload(max(1, math.ceil(num_requests / 6)), rate=rate, seed=seed)
    return shared_prompt_workload(num_requests, rate=rate, seed=seed)
