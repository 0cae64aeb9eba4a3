"""Cache-aware scheduling: longest cached prefix first, and never overtaken without end.

The scheduler is driven as the engine drives it (schedule, sample one token per chunk, finish
the done ones), without a model: what matters here is who is admitted when.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paged_kv import InvalidArgument, KVCacheManager
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import TinyLM, greedy_dense
from paged_kv.serving.scheduler import Request, SamplingParams, Scheduler

BS = 4
SYSTEMS = [[s * 50 + t for t in range(12)] for s in range(3)]  # three 3-block system prompts


def step(scheduler: Scheduler) -> list[int]:
    """One engine step without a model; the ids admitted (prefills) in order."""
    plan = run_step(scheduler)
    return [c.request.request_id for c in plan.chunks if c.admitted]


def run_step(scheduler: Scheduler):
    """Schedule, sample one token per chunk, finish the done requests: the plan."""
    plan = scheduler.schedule()
    for chunk in plan.chunks:
        chunk.request.record_sample(1)
        if chunk.request.is_done:
            scheduler.finish(chunk.request)
    return plan


def request(i: int, system: int | None, tail: int, new_tokens: int = 2) -> Request:
    prefix = [] if system is None else SYSTEMS[system]
    return Request(i, [*prefix, *range(200 + i, 200 + i + tail)], SamplingParams(new_tokens))


def warm(manager: KVCacheManager, system: int) -> None:
    manager.add_sequence("warm", [*SYSTEMS[system], 1])
    manager.free_sequence("warm")


def test_the_request_with_the_longest_cached_prefix_goes_first():
    admitted = {}
    for policy in ("fcfs", "longest_prefix"):
        manager = KVCacheManager(64, BS)
        warm(manager, 0)
        scheduler = Scheduler(manager, max_batch_tokens=16, max_running=4, policy=policy)
        for i, system in enumerate([None, 1, 0, 0]):
            scheduler.add(request(i, system, 3))
        admitted[policy] = [step(scheduler) for _ in range(4)]
    assert admitted["fcfs"] == [[0], [1], [2, 3], []]
    # 2 and 3 hit 12 cached tokens and cost 3 each, 0 costs 3 too: all fit the first step's
    # 16 tokens; 1 (15 tokens, nothing cached) waits for the room they leave
    assert admitted["longest_prefix"] == [[2, 3, 0], [], [1], []]


def test_a_request_is_overtaken_at_most_max_overtaken_times():
    manager = KVCacheManager(64, BS)
    warm(manager, 0)
    scheduler = Scheduler(
        manager, max_batch_tokens=8, max_running=1, policy="longest_prefix", max_overtaken=2
    )
    cold = request(0, None, 5)
    scheduler.add(cold)
    order = []
    for i in range(1, 8):  # a hit-rich request arrives every step
        scheduler.add(request(i, 0, 1, new_tokens=1))
        order += step(scheduler)
        assert cold.times_overtaken <= 2
    assert order[:4] == [1, 2, 0, 3]  # passed twice, then its turn


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from([None, 0, 1, 2]), st.integers(1, 9)), max_size=25),
    st.integers(0, 3),
    st.integers(0, 3),
)
def test_everyone_is_served_and_no_one_passed_more_than_allowed(arrivals, max_overtaken, burst):
    manager = KVCacheManager(24, BS, eviction="lru")
    scheduler = Scheduler(
        manager, max_batch_tokens=24, max_running=3, policy="longest_prefix",
        max_overtaken=max_overtaken,
    )  # fmt: skip
    queue = [request(i, s, t) for i, (s, t) in enumerate(arrivals)]
    admitted: list[int] = []
    for _step in range(200):
        for _ in range(burst + 1):  # a few arrivals per step
            if queue:
                scheduler.add(queue.pop(0))
        admitted += step(scheduler)
        assert all(r.times_overtaken <= max_overtaken for r in scheduler.waiting)
        if not queue and not scheduler.waiting and not scheduler.running:
            break
    assert sorted(set(admitted)) == list(range(len(arrivals)))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([None, 0, 1]), st.integers(1, 9)), max_size=15))
def test_with_no_overtaking_allowed_it_is_fcfs(arrivals):
    plans = []
    for policy in ("fcfs", "longest_prefix"):
        manager = KVCacheManager(20, BS)
        warm(manager, 0)
        scheduler = Scheduler(
            manager, max_batch_tokens=16, max_running=2, policy=policy, max_overtaken=0
        )
        for i, (s, t) in enumerate(arrivals):
            scheduler.add(request(i, s, t))
        plans.append([run_step(scheduler).describe() for _ in range(6)])
    assert plans[0] == plans[1]


def test_an_unknown_policy_is_refused():
    with pytest.raises(InvalidArgument, match="longest_prefix"):
        Scheduler(KVCacheManager(8, BS), policy="shortest_job")
    with pytest.raises(InvalidArgument, match="max_overtaken"):
        Scheduler(KVCacheManager(8, BS), policy="longest_prefix", max_overtaken=-1)


def test_the_engine_schedules_longest_prefix_first_and_generates_the_same_tokens():
    model = TinyLM(seed=0)
    rng = random.Random(1)
    systems = [[rng.randrange(256) for _ in range(48)] for _ in range(3)]
    prompts = [systems[i % 3] + [rng.randrange(256) for _ in range(5)] for i in range(12)]
    expected = [greedy_dense(model, p, 4) for p in prompts]
    saved = {}
    for schedule in ("fcfs", "longest_prefix"):
        engine = Engine(
            model, num_blocks=40, block_size=16, max_batch_tokens=64, max_running=2,
            schedule=schedule,
        )  # fmt: skip
        assert engine.scheduler.policy == schedule
        assert [c.token_ids for c in engine.generate(prompts, 4)] == expected
        saved[schedule] = engine.stats().prefill_tokens_saved
    assert saved["longest_prefix"] >= saved["fcfs"]
