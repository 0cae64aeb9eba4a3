"""The scheduler's behaviour, step by step: what the end-to-end token checks cannot see.

The engine's tests compare tokens with dense decoding, and a scheduler can get those right
while it does the wrong work: decoding only every second running request still ends with
the dense tokens, only later. These tests watch each step's plan instead.
"""

import random
from collections import Counter
from functools import cache

import pytest

from paged_kv import KVCacheManager
from paged_kv.serving import (
    Engine,
    RequestStatus,
    SamplingParams,
    Scheduler,
    StepPlan,
    TinyLM,
)


@cache
def model() -> TinyLM:
    return TinyLM(seed=0)


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


# -- admission at the budget's edge ---------------------------------------------------------


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


# -- step numbers -----------------------------------------------------------------------------


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


# -- sampling streams -------------------------------------------------------------------------


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
