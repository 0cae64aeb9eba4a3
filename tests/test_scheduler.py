"""The serving layer's argument checks at their edges, and its documented defaults.

`SamplingParams`, `Scheduler` and `Engine` each refuse a bad value with `InvalidArgument`
(a `ValueError`) before anything changes, and accept the last good value."""

import math
from functools import cache

import pytest

from paged_kv import LRU, InvalidArgument, KVCacheManager
from paged_kv.serving import Engine, SamplingParams, Scheduler, TinyLM, greedy_dense


@cache
def model() -> TinyLM:
    return TinyLM(seed=0)


@pytest.mark.parametrize("bad", [0, -1, True, False, 1.0, "3", None])
def test_max_new_tokens_must_be_a_positive_int(bad):
    with pytest.raises(InvalidArgument, match="max_new_tokens"):
        SamplingParams(max_new_tokens=bad)


@pytest.mark.parametrize("bad", [-1.0, -1e-12, -1, math.nan, -math.inf])
def test_temperature_must_be_a_non_negative_number(bad):
    with pytest.raises(InvalidArgument, match="temperature"):
        SamplingParams(temperature=bad)


def test_the_last_good_sampling_values():
    assert SamplingParams(max_new_tokens=1).max_new_tokens == 1
    assert SamplingParams(temperature=0).temperature == 0
    assert SamplingParams(temperature=1e-12).temperature == 1e-12


def test_sampling_defaults():
    params = SamplingParams()
    assert params == SamplingParams(16, 0.0, None, ())
    assert (params.max_new_tokens, params.temperature) == (16, 0.0)
    assert params.seed is None and params.stop_token_ids == ()


def test_one_new_token_means_one_step_and_one_token():
    engine = Engine(model(), num_blocks=8, block_size=4)
    rid = engine.add_request([3, 1, 4], SamplingParams(1))
    engine.step()
    assert not engine.has_unfinished()
    assert engine.completion(rid).token_ids == greedy_dense(model(), [3, 1, 4], 1)


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


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_blocks": 0},
        {"num_blocks": True},
        {"num_blocks": 8, "block_size": 0},
        {"num_blocks": 8, "max_batch_tokens": 0},
        {"num_blocks": 8, "max_running": 0},
    ],
)
def test_engine_construction_edges(kwargs):
    with pytest.raises(InvalidArgument):
        Engine(model(), **kwargs)


def test_a_request_may_fill_the_whole_cache_but_not_one_token_more():
    engine = Engine(model(), num_blocks=4, block_size=4)
    rid = engine.add_request(list(range(12)), SamplingParams(4))  # 16 tokens: 4 blocks
    with pytest.raises(InvalidArgument, match="whole cache has 4"):
        engine.add_request(list(range(13)), SamplingParams(4))  # 17 tokens: 5 blocks
    assert list(engine.requests) == [rid] and len(engine.scheduler.waiting) == 1
    engine.run()
    assert len(engine.completion(rid).token_ids) == 4


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_new_tokens": 0},
        {"max_new_tokens": True},
        {"temperature": -0.5},
        {"temperature": math.nan},
    ],
)
def test_bad_generate_arguments_change_nothing(kwargs):
    engine = Engine(model(), num_blocks=8, block_size=4)
    rid = engine.add_request([1, 2], SamplingParams(3))
    engine.step()
    before = engine.stats()
    with pytest.raises(InvalidArgument):
        engine.generate([[5, 6]], **kwargs)
    assert list(engine.requests) == [rid]
    assert [r.request_id for r in engine.scheduler.running] == [rid]
    assert not engine.scheduler.waiting
    after = engine.stats()
    assert (after.requests, after.steps, after.prompt_tokens) == (
        before.requests,
        before.steps,
        before.prompt_tokens,
    )
    engine.run()
    assert engine.completion(rid).token_ids == greedy_dense(model(), [1, 2], 3)
