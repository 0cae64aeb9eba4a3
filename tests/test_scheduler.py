"""The serving layer's argument checks at their edges, and its documented defaults.

`SamplingParams`, `Scheduler` and `Engine` each refuse a bad value with `InvalidArgument`
(a `ValueError`) before anything changes, and accept the last good value."""

from __future__ import annotations

import math
import random
from collections import Counter
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paged_kv import LRU, InvalidArgument, KVCacheManager
from paged_kv.serving import (
    Engine,
    RequestStatus,
    SamplingParams,
    Scheduler,
    StepPlan,
    TinyLM,
    greedy_dense,
)
from paged_kv.serving.scheduler import MIN_TEMPERATURE, Request


@cache
def model() -> TinyLM:
    return TinyLM(seed=0)


@pytest.mark.parametrize("bad", [0, -1, True, False, 1.0, "3", None])
def test_max_new_tokens_must_be_a_positive_int(bad):
    with pytest.raises(InvalidArgument, match="max_new_tokens"):
        SamplingParams(max_new_tokens=bad)


@pytest.mark.parametrize(
    "bad", [-1.0, -1e-12, -1, math.nan, -math.inf, math.inf, MIN_TEMPERATURE / 2, 1e-45, "1", True]
)
def test_temperature_must_be_a_non_negative_number(bad):
    with pytest.raises(InvalidArgument, match="temperature"):
        SamplingParams(temperature=bad)


def test_the_last_good_sampling_values():
    assert SamplingParams(max_new_tokens=1).max_new_tokens == 1
    assert SamplingParams(temperature=0).temperature == 0
    assert SamplingParams(temperature=MIN_TEMPERATURE).temperature == MIN_TEMPERATURE


def test_sampling_defaults():
    params = SamplingParams()
    assert params == SamplingParams(16, 0.0, None, ())
    assert (params.max_new_tokens, params.temperature) == (16, 0.0)
    assert params.seed is None and params.stop_token_ids == ()


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, None])
def test_scheduler_budgets_must_be_positive_ints(bad):
    m = KVCacheManager(8, 4)
    with pytest.raises(InvalidArgument, match="max_batch_tokens"):
        Scheduler(m, max_batch_tokens=bad, max_running=1)
    with pytest.raises(InvalidArgument, match="max_running"):
        Scheduler(m, max_batch_tokens=8, max_running=bad)


@pytest.mark.parametrize("budget", [1, 2, 8])
def test_max_running_may_equal_the_budget_but_not_exceed_it(budget):
    m = KVCacheManager(8, 4)
    scheduler = Scheduler(m, max_batch_tokens=budget, max_running=budget)
    assert (scheduler.max_batch_tokens, scheduler.max_running) == (budget, budget)
    with pytest.raises(InvalidArgument, match="max_running"):
        Scheduler(m, max_batch_tokens=budget, max_running=budget + 1)
    with pytest.raises(InvalidArgument, match="max_running"):
        Engine(model(), num_blocks=8, max_batch_tokens=budget, max_running=budget + 1)


def test_a_budget_of_one_token_still_serves_everyone():
    engine = Engine(model(), num_blocks=8, block_size=4, max_batch_tokens=1, max_running=1)
    out = engine.generate([[1, 2, 3], [4, 5]], 3)
    assert [c.token_ids for c in out] == [
        greedy_dense(model(), [1, 2, 3], 3),
        greedy_dense(model(), [4, 5], 3),
    ]


def test_scheduler_and_engine_defaults():
    scheduler = Scheduler(KVCacheManager(8, 4))
    assert (scheduler.max_batch_tokens, scheduler.max_running) == (512, 32)
    engine = Engine(model(), num_blocks=8)
    assert engine.manager.block_size == 16 and engine.manager.pool.block_size == 16
    assert isinstance(engine.manager.pool.policy, LRU)
    assert (engine.scheduler.max_batch_tokens, engine.scheduler.max_running) == (512, 32)
    assert type(engine.scheduler) is Scheduler
    out = engine.generate([list(range(17)), list(range(17))], 1)
    assert out[1].num_cached_prompt_tokens == 16  # prefix caching is on
    assert len(out[0].token_ids) == 1


# The scheduler's behaviour, step by step: what the end-to-end token checks cannot see.


def prompts(n: int, seed: int = 0) -> list[list[int]]:
    """`n` prompts behind a shared 20-token system prompt, so prefix hits happen."""
    rng = random.Random(seed)
    system = [rng.randrange(256) for _ in range(20)]
    return [system + [rng.randrange(256) for _ in range(rng.randrange(1, 20))] for _ in range(n)]


def step_and_check(engine: Engine) -> StepPlan:
    """One engine step, checking that every running request that is not preempted decodes
    exactly one token, oldest first, before any admission; each admitted request prefills
    once; and every scheduled request, and only those, gains exactly one output token."""
    running = list(engine.scheduler.running)
    before = {
        rid: (len(r.output), len(r.prompt) + len(r.output)) for rid, r in engine.requests.items()
    }
    plan = engine.step()
    preempted = {p.request_id for p in plan.preempted}
    per_request = Counter(c.request.request_id for c in plan.chunks)
    assert all(n == 1 for n in per_request.values()), plan.describe()
    decodes = [c for c in plan.chunks if not c.admitted]
    assert plan.chunks[: len(decodes)] == decodes, "decodes come before admissions"
    expected = [r.request_id for r in running if r.request_id not in preempted]
    assert [c.request.request_id for c in decodes] == expected, plan.describe()
    for chunk in decodes:
        assert chunk.num_tokens == 1
        assert chunk.start == before[chunk.request.request_id][1] - 1  # the pending token
    for chunk in plan.chunks:
        if chunk.admitted:
            assert chunk.start + chunk.num_tokens == before[chunk.request.request_id][1]
    for rid, request in engine.requests.items():
        grown = len(request.output) - before[rid][0]
        assert grown == per_request[rid], f"request {rid} gained {grown}: {plan.describe()}"
    return plan


@pytest.mark.parametrize(
    "num_blocks, block_size, budget, running_cap, preempts",
    [
        (200, 4, 512, 32, False),  # room for everyone: long runs of pure decode steps
        (13, 4, 64, 8, True),  # tight: preemptions, readmissions with prefix hits
        (6, 8, 24, 6, True),  # tighter, with the budget binding as well
    ],
)
def test_every_running_request_decodes_exactly_one_token_per_step(
    num_blocks, block_size, budget, running_cap, preempts
):
    engine = Engine(
        model(),
        num_blocks=num_blocks,
        block_size=block_size,
        max_batch_tokens=budget,
        max_running=running_cap,
    )
    work = prompts(7)
    ids = [engine.add_request(p, SamplingParams(6)) for p in work]
    decode_only_steps = 0
    while engine.has_unfinished():
        plan = step_and_check(engine)
        decode_only_steps += not any(c.admitted for c in plan.chunks)
    assert decode_only_steps > 0
    assert bool(engine.stats().preemptions) == preempts
    for rid in ids:
        assert len(engine.completion(rid).token_ids) == 6


def test_a_long_decode_phase_advances_all_requests_together():
    """With everyone admitted in step 0, request i finishes in step max_new_tokens - 1."""
    engine = Engine(model(), num_blocks=100, block_size=4)
    ids = [engine.add_request(p, SamplingParams(5)) for p in prompts(4)]
    finished_at = {}
    step = 0
    while engine.has_unfinished():
        plan = step_and_check(engine)
        for chunk in plan.chunks:
            if chunk.request.status is RequestStatus.FINISHED:
                finished_at[chunk.request.request_id] = step
        step += 1
    assert finished_at == dict.fromkeys(ids, 4)


def admitted(plan: StepPlan) -> list[int]:
    return [c.request.request_id for c in plan.chunks if c.admitted]


@pytest.mark.parametrize("second_cost, admits", [(6, True), (7, False)])
def test_a_request_costing_exactly_the_budget_left_is_admitted(second_cost, admits):
    engine = Engine(model(), num_blocks=64, block_size=4, max_batch_tokens=10, max_running=4)
    for rid, length in enumerate([4, second_cost, 1]):
        engine.add_request([10 * rid + t for t in range(length)], SamplingParams(3))
    plan = engine.step()
    assert plan.token_budget == 10
    # 4 + 6 = 10 fills the budget exactly; 4 + 7 does not fit, and nobody overtakes.
    assert admitted(plan) == ([0, 1] if admits else [0])
    assert plan.budget_left == (0 if admits else 6)
    assert [r.request_id for r in engine.scheduler.waiting] == ([2] if admits else [1, 2])


@pytest.mark.parametrize("extra, admits", [(3, True), (4, False)])
def test_a_request_is_priced_by_its_tokens_minus_prefix_hits(extra, admits):
    """A running request decodes 1 token of a budget of 4; a new one with 8 cached prompt
    tokens costs `extra` (its uncached tail): 3 fits exactly, 4 does not."""
    engine = Engine(model(), num_blocks=64, block_size=4, max_batch_tokens=4, max_running=4)
    system = list(range(200, 208))  # two full blocks, cached by the first request
    engine.add_request([*system, 1], SamplingParams(1))
    engine.step()  # runs and finishes in one step; its full blocks stay cached
    engine.add_request([5], SamplingParams(10))
    engine.step()  # admitted; from now on it decodes one token per step
    newcomer = [*system, *range(100, 100 + extra)]
    assert engine.manager.num_prefix_hit_tokens(newcomer) == 8
    rid = engine.add_request(newcomer, SamplingParams(2))
    plan = engine.step()
    assert [c.request.request_id for c in plan.chunks if not c.admitted] == [1]
    if admits:
        assert admitted(plan) == [rid]
        assert plan.chunks[-1].start == 8 and plan.chunks[-1].num_tokens == 3
        assert plan.budget_left == 0
    else:
        assert admitted(plan) == [] and plan.budget_left == 3


def test_a_request_bigger_than_the_budget_runs_alone():
    engine = Engine(model(), num_blocks=64, block_size=4, max_batch_tokens=4, max_running=4)
    engine.add_request(list(range(9)), SamplingParams(2))
    engine.add_request([1], SamplingParams(2))
    plan = engine.step()
    assert admitted(plan) == [0] and plan.num_tokens == 9 and plan.budget_left == -5
    plan = engine.step()  # the decode of 0 leaves room for 1
    assert [c.request.request_id for c in plan.chunks] == [0, 1]


def test_step_numbers_start_at_zero_and_count_up_by_one():
    """Scheduler.__init__ starts at step 0 and each `schedule` plans the next step: plans,
    the engine's timeline and preemption records all use the same numbers."""
    engine = Engine(model(), num_blocks=6, block_size=8, max_batch_tokens=24, max_running=6)
    assert engine.scheduler.step == 0
    for p in prompts(7):
        engine.add_request(p, SamplingParams(6))
    plans = []
    while engine.has_unfinished():
        plans.append(engine.step())
        assert engine.scheduler.step == len(plans)  # the number of the next step
    assert [p.step for p in plans] == list(range(len(plans)))
    assert [r.step for r in engine.timeline] == list(range(len(plans)))
    records = [p for plan in plans for p in plan.preempted]
    assert records, "the cache is tight enough to preempt"
    for plan in plans:
        assert all(p.step == plan.step for p in plan.preempted)
    assert engine.stats().preemptions == records
    assert engine.stats().steps == len(plans)


def test_step_numbers_of_a_bare_scheduler():
    scheduler = Scheduler(KVCacheManager(8, 4))
    assert [scheduler.schedule().step for _ in range(3)] == [0, 1, 2]  # even when idle


def sampled(engine: Engine, prompt: list[int], params: SamplingParams, times: int) -> list:
    ids = [engine.add_request(prompt, params) for _ in range(times)]
    engine.run()
    return [tuple(engine.completion(i).token_ids) for i in ids]


def test_requests_without_a_seed_do_not_share_a_random_stream():
    prompt = prompts(1)[0]
    unseeded = SamplingParams(8, temperature=1.5)
    together = sampled(Engine(model(), num_blocks=100, block_size=4), prompt, unseeded, 6)
    assert len(set(together)) > 1  # same prompt, same step, each its own stream
    apart = [
        sampled(Engine(model(), num_blocks=100, block_size=4), prompt, unseeded, 1)[0]
        for _ in range(4)
    ]
    assert len(set(apart)) > 1  # nor one fixed stream per engine


def test_seeded_requests_reproduce_exactly_batched_or_alone():
    prompt = prompts(1)[0]
    seeded = SamplingParams(8, temperature=1.5, seed=11)
    batched = sampled(Engine(model(), num_blocks=100, block_size=4), prompt, seeded, 3)
    assert len(set(batched)) == 1  # same seed, same prompt, same batch: same tokens
    [alone] = sampled(Engine(model(), num_blocks=100, block_size=4), prompt, seeded, 1)
    assert batched[0] == alone
    # Unseeded neighbours and the global torch RNG do not disturb a seeded stream.
    engine = Engine(model(), num_blocks=100, block_size=4)
    noise = [engine.add_request(prompt, SamplingParams(8, temperature=1.5)) for _ in range(2)]
    rid = engine.add_request(prompt, seeded)
    engine.run()
    assert tuple(engine.completion(rid).token_ids) == alone
    assert all(engine.completion(i).token_ids for i in noise)
    other_seed = sampled(
        Engine(model(), num_blocks=100, block_size=4),
        prompt,
        SamplingParams(8, temperature=1.5, seed=12),
        1,
    )
    assert other_seed[0] != alone


# Cache-aware scheduling: longest cached prefix first, and never overtaken without end.


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
