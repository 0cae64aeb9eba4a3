"""The A0 oracle: a policy told the workload generator's state, its true popularity of every block.

Belady knows the future trace; no online policy does. The *A0* policy (Aho, Denning and
Ullman, 1971) evicts the cached block least likely to be read next, from the true probabilities:
among demand policies (every missed block is brought in), it is optimal in expectation when
references are independent draws, as the prefix each request picks is here. What separates A0
from Belady is the future's randomness. It knows more than any policy can (which prefix is the
favourite, when a chat session will end): online_limit.py gives it only what the past reveals.
"""

from __future__ import annotations

import heapq

from paged_kv.study.trace_replay import HitStats
from paged_kv.study.workloads import RatedTrace
from paged_kv.validation import require_positive_int


def oracle_hits(rated: RatedTrace, capacity: int) -> HitStats:
    """Replay `rated.keys` evicting the cached block with the lowest true rate (ties: LRU).

    Rates come from `rated.changes`, each applied from its position on (a block never given
    one has rate 0). Not a deployable policy: it reads the generator's state. O(log n) per
    access and change: cached blocks wait in a min-heap; entries made stale by a later access
    or rate change are skipped when they surface.
    """
    require_positive_int("capacity", capacity)
    rate: dict[int, float] = {}
    last: dict[int, int] = {}  # cached block -> time of its last access
    heap: list[tuple[float, int, int]] = []  # (rate, last access, block)
    changes, applied = rated.changes, 0
    hits = 0
    for t, key in enumerate(rated.keys):
        while applied < len(changes) and changes[applied][0] <= t:
            _, block, new_rate = changes[applied]
            applied += 1
            rate[block] = new_rate
            if block in last:
                heapq.heappush(heap, (new_rate, last[block], block))
        if key in last:
            hits += 1
        elif len(last) >= capacity:
            while True:
                r, when, victim = heapq.heappop(heap)
                if last.get(victim) == when and rate.get(victim, 0.0) == r:
                    del last[victim]
                    break
        last[key] = t
        heapq.heappush(heap, (rate.get(key, 0.0), t, key))
    return HitStats("oracle", capacity, hits, len(rated.keys) - hits)
