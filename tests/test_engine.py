"""The engine: exactly the tokens of dense decoding, whatever the cache had to do to get there."""

import math
import random
from functools import cache, partial
from typing import Any, cast

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from paged_kv import InvalidArgument, PagedKVError
from paged_kv.cache.eviction import POLICIES
from paged_kv.errors import RequestForgotten
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import ModelConfig, TinyLM, greedy_dense
from paged_kv.serving.scheduler import (
    MAX_SEED,
    MIN_TEMPERATURE,
    RequestStatus,
    SamplingParams,
    Scheduler,
)

NEW_TOKENS = 12


@cache
def model() -> TinyLM:
    return TinyLM(seed=0)


@cache
def workload() -> tuple[list[list[int]], list[list[int]]]:
    """Mixed-length prompts, most behind a shared 40-token system prompt, and their dense
    greedy continuations."""
    rng = random.Random(0)
    system = [rng.randrange(256) for _ in range(40)]
    prompts = [system + [rng.randrange(256) for _ in range(rng.randrange(1, 30))] for _ in range(7)]
    prompts.append([rng.randrange(256) for _ in range(23)])
    return prompts, [greedy_dense(model(), p, NEW_TOKENS) for p in prompts]


def tight_engine(block_size: int, eviction: str = "lru", **kwargs) -> Engine:
    """A cache of just enough blocks for the longest request plus two: it must preempt."""
    prompts, _ = workload()
    longest = max(-(-(len(p) + NEW_TOKENS) // block_size) for p in prompts)
    return Engine(
        model(), num_blocks=longest + 2, block_size=block_size, eviction=eviction, **kwargs
    )


@pytest.mark.parametrize("eviction", sorted(POLICIES))
@pytest.mark.parametrize("block_size", [1, 16, 7])
def test_greedy_output_equals_dense_decoding_under_memory_pressure(block_size, eviction):
    prompts, expected = workload()
    engine = tight_engine(block_size, eviction, max_batch_tokens=128, max_running=8)
    completions = engine.generate(prompts, NEW_TOKENS)
    assert [c.token_ids for c in completions] == expected
    stats = engine.stats()
    assert stats.preemptions and stats.evictions and stats.prefill_tokens_saved
    assert stats.recomputed_tokens > 0
    assert stats.generated_tokens == len(prompts) * NEW_TOKENS
    assert engine.manager.stats().num_in_use_blocks == 0  # everything released at the end


def test_prefix_caching_saves_prefill_without_changing_the_tokens():
    prompts, expected = workload()
    runs = {}
    for caching in (True, False):
        engine = Engine(model(), num_blocks=200, block_size=4, prefix_caching=caching)
        assert [c.token_ids for c in engine.generate(prompts, NEW_TOKENS)] == expected
        runs[caching] = engine.stats()
    assert runs[False].prefill_tokens_saved == 0
    assert runs[True].prefill_tokens_saved >= 6 * 40 // 4 * 4  # the system prompt, 6 times
    assert (
        runs[True].prefill_tokens_computed + runs[True].prefill_tokens_saved
        == runs[False].prefill_tokens_computed
        == sum(map(len, prompts))
    )


def test_continuous_batching_admits_new_requests_while_others_decode():
    prompts, expected = workload()
    engine = Engine(model(), num_blocks=200, block_size=16, max_batch_tokens=64)
    ids = [engine.add_request(p, SamplingParams(NEW_TOKENS)) for p in prompts]
    mixed = 0
    while engine.has_unfinished():
        plan = engine.step()
        kinds = {c.admitted for c in plan.chunks}
        mixed += kinds == {True, False}
        assert plan.num_tokens <= 64 or len(plan.chunks) == 1
    assert mixed > 0
    assert [engine.completion(i).token_ids for i in ids] == expected
    stats = engine.stats()
    assert len(engine.timeline) == stats.steps
    assert sum(r.generated_tokens for r in engine.timeline) == stats.generated_tokens
    assert sum(r.prefill_tokens for r in engine.timeline) == stats.prefill_tokens_computed
    assert [r.time_s for r in engine.timeline] == sorted(r.time_s for r in engine.timeline)


def test_every_step_respects_the_running_cap():
    prompts, _ = workload()
    engine = Engine(model(), num_blocks=200, block_size=8, max_running=3)
    for p in prompts:
        engine.add_request(p, SamplingParams(4))
    while engine.has_unfinished():
        engine.step()
        assert len(engine.scheduler.running) <= 3
    assert engine.stats().peak_running == 3


def test_preemption_says_who_and_why_and_the_victim_is_the_newest():
    prompts, _ = workload()
    engine = tight_engine(16, max_batch_tokens=256)
    engine.generate(prompts, NEW_TOKENS)
    first = engine.stats().preemptions[0]
    assert f"request {first.request_id} is the newest running" in first.reason
    assert "needed a block for its next token" in first.reason
    assert first.num_tokens > len(prompts[first.request_id])


def test_seeded_sampling_does_not_depend_on_batching():
    prompts, expected = workload()
    together = Engine(model(), num_blocks=200).generate(prompts, 8, temperature=1.0, seed=7)
    alone = [
        Engine(model(), num_blocks=200).add_request(p, SamplingParams(8, 1.0, seed=7 + i))
        for i, p in enumerate(prompts)
    ]
    assert alone == [0] * len(prompts)  # each engine numbers its requests from 0
    singles = []
    for i, p in enumerate(prompts):
        engine = Engine(model(), num_blocks=200)
        rid = engine.add_request(p, SamplingParams(8, 1.0, seed=7 + i))
        engine.run()
        singles.append(engine.completion(rid).token_ids)
    assert [c.token_ids for c in together] == singles
    assert [c.token_ids for c in together] != [e[:8] for e in expected]  # really sampled


def test_stop_tokens_end_a_request_early():
    prompts, expected = workload()
    stop = expected[0][3]
    out = Engine(model(), num_blocks=200).generate(prompts[:1], NEW_TOKENS, stop_token_ids=[stop])
    assert out[0].token_ids == expected[0][: expected[0].index(stop) + 1]


def test_the_models_eos_ends_a_request_unless_it_ignores_eos():
    prompts, expected = workload()
    eos = expected[0][3]
    assert model().eos_token_ids == ()  # TinyLM has none unless given one
    with_eos = TinyLM(seed=0)
    with_eos.eos_token_ids = (eos,)
    engine = Engine(with_eos, num_blocks=200)
    [stopped] = engine.generate(prompts[:1], NEW_TOKENS)
    assert stopped.token_ids == expected[0][: expected[0].index(eos) + 1]
    [ignored] = engine.generate(prompts[:1], NEW_TOKENS, ignore_eos=True)
    rid = engine.add_request(prompts[0], SamplingParams(NEW_TOKENS, ignore_eos=True))
    engine.run()
    assert ignored.token_ids == engine.completion(rid).token_ids == expected[0]


def test_text_prompts_go_through_the_tokenizer():
    engine = Engine(model(), num_blocks=50)
    [completion] = engine.generate(["hello"], 5)
    assert completion.prompt_ids == list(b"hello")
    assert completion.token_ids == greedy_dense(model(), list(b"hello"), 5)
    assert completion.text == engine.tokenizer.decode(completion.token_ids)


@pytest.mark.parametrize(
    "prompt, params, message",
    [
        ([], SamplingParams(4), "empty"),
        ("", SamplingParams(4), "empty"),
        ([1, 2, 256], SamplingParams(4), "0..255"),
        ([1, True, 3], SamplingParams(4), "found True"),
        ([1, 2.0], SamplingParams(4), "found 2.0"),
        ([1] * 60, SamplingParams(40), "whole cache has 6"),
    ],
)
def test_bad_requests_are_refused_without_disturbing_running_ones(prompt, params, message):
    prompts, expected = workload()
    engine = Engine(model(), num_blocks=6, block_size=16)
    rid = engine.add_request(prompts[0], SamplingParams(NEW_TOKENS))
    engine.step()
    engine.step()
    with pytest.raises(InvalidArgument, match=message):
        engine.add_request(prompt, params)
    assert len(engine.requests) == 1 and len(engine.scheduler.waiting) == 0
    engine.run()
    assert engine.completion(rid).token_ids == expected[0]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_max_new_tokens_must_be_a_positive_int(bad):
    with pytest.raises(InvalidArgument, match="max_new_tokens"):
        SamplingParams(bad)
    with pytest.raises(InvalidArgument):
        Engine(model(), num_blocks=10).generate(["hi"], bad)


def test_generate_checks_every_prompt_before_queueing_any():
    engine = Engine(model(), num_blocks=10)
    with pytest.raises(InvalidArgument):
        engine.generate(["fine", ""], 3)
    assert not engine.requests and not engine.has_unfinished()


def test_numpy_and_torch_integers_are_token_ids():
    import numpy as np
    import torch

    engine = Engine(model(), num_blocks=20)
    prompts = [np.array([104, 105]), torch.tensor([104, 105]), [np.int64(104), 105]]
    out = engine.generate(prompts, 3)
    assert [c.prompt_ids for c in out] == [[104, 105]] * 3
    assert len({tuple(c.token_ids) for c in out}) == 1


def test_asking_for_an_unknown_request_says_so():
    with pytest.raises(InvalidArgument, match="no request 7"):
        Engine(model(), num_blocks=10).completion(7)


@cache
def tiny_model() -> TinyLM:
    return TinyLM(ModelConfig(hidden_size=16, intermediate_size=32, num_layers=1), seed=0)


def test_a_long_running_engine_keeps_what_it_holds_at_its_bounds():
    """Hundreds of requests over a hundred tenants, through the radix index and a tier store:
    the requests, the timeline, the connector's block sources and the index's namespaces all
    stay at their bounds, while `stats()` counts every request."""
    from paged_kv.cache.manager import KVCacheManager
    from paged_kv.tiers import HostTier, TieredStore

    engine = Engine(
        tiny_model(),
        num_blocks=32,
        block_size=4,
        max_running=4,
        manager_factory=partial(KVCacheManager, prefix_index="radix"),
        store=TieredStore([HostTier(1 << 20)], metrics=None),
        keep_finished=5,
        keep_steps=7,
    )
    assert engine.connector is not None
    index = engine.manager.prefix_cache
    rng = random.Random(0)
    for i in range(300):
        prompt = [rng.randrange(256) for _ in range(rng.randrange(5, 12))]
        engine.add_request(prompt, SamplingParams(2), salt=f"tenant {i % 100}")
        if i % 3 == 2:
            engine.run()
        unfinished = len(engine.scheduler.waiting) + len(engine.scheduler.running)
        assert len(engine.requests) <= 5 + unfinished
        assert len(engine.timeline) <= 7
        assert len(engine.connector.block_sources) <= 5 + 4
        assert len(index._roots) <= len(index)  # a namespace only while a block of it is
    stats = engine.stats()
    assert stats.requests == 300 and stats.generated_tokens == 600
    assert [r.step for r in engine.timeline] == list(range(stats.steps - 7, stats.steps))
    assert sorted(engine.requests) == list(range(295, 300))
    assert engine.completion(299).token_ids
    with pytest.raises(RequestForgotten, match=r"request 3 is done and forgotten.*keep_finished"):
        engine.completion(3)
    with pytest.raises(InvalidArgument, match="no request 300"):
        engine.completion(300)


def test_generate_returns_every_completion_however_few_are_kept():
    prompts, expected = workload()
    engine = Engine(model(), num_blocks=64, block_size=8, keep_finished=0, keep_steps=0)
    assert [c.token_ids for c in engine.generate(prompts, NEW_TOKENS)] == expected
    assert not engine.requests and not engine.timeline and engine.stats().steps
    with pytest.raises(RequestForgotten):
        engine.completion(0)


@pytest.mark.parametrize("model", [None, torch.nn.Linear(3, 3), "tiny"])
def test_a_model_the_engine_cannot_serve_is_refused_naming_what_it_serves(model):
    with pytest.raises(InvalidArgument, match="Engine serves a paged_kv TinyLM"):
        Engine(model, num_blocks=8)


def test_stats_count_every_preemption_and_list_those_of_the_last_steps():
    engine = Engine(tiny_model(), num_blocks=6, block_size=4, max_running=8, keep_steps=3)
    counted = 0
    for _ in range(20):
        engine.generate(["x" * 10] * 4, 8)
        stats = engine.stats()
        assert stats.num_preemptions >= counted and len(stats.preemptions) <= 3
        counted = stats.num_preemptions
    assert counted > 3, "the pool was tight enough to preempt, round after round"
    assert stats.summary()["preemptions"] == counted


def test_an_aborted_request_is_forgotten_like_a_finished_one():
    engine = Engine(model(), num_blocks=10, keep_finished=1)
    first, second = (engine.add_request("abc", SamplingParams(3)) for _ in range(2))
    engine.abort(first)
    assert engine.requests[first].status is RequestStatus.ABORTED
    engine.abort(second)
    assert list(engine.requests) == [second]
    with pytest.raises(RequestForgotten):
        engine.abort(first)


def test_a_request_whose_release_failed_is_forgotten_once_finished():
    class FailsOnce(Scheduler):
        failed = False

        def finish(self, request):
            if not FailsOnce.failed:
                FailsOnce.failed = True
                raise RuntimeError("injected: the release failed")
            super().finish(request)

    engine = Engine(model(), num_blocks=10, scheduler=FailsOnce, keep_finished=0)
    rid = engine.add_request("abc", SamplingParams(1))
    with pytest.raises(RuntimeError, match="injected"):
        engine.step()
    assert engine.requests[rid].status is RequestStatus.RUNNING  # kept until it is finished
    engine.add_request("de", SamplingParams(1))
    engine.run()
    assert not engine.requests and engine.manager.pool.num_in_use == 0


@pytest.mark.parametrize("name", ["keep_finished", "keep_steps"])
def test_the_bounds_must_be_whole_numbers(name):
    with pytest.raises(InvalidArgument, match=name):
        Engine(model(), num_blocks=10, **{name: -1})


def test_a_completion_is_only_ready_when_finished():
    engine = Engine(model(), num_blocks=10)
    rid = engine.add_request("abc", SamplingParams(3))
    engine.step()
    assert engine.requests[rid].status is RequestStatus.RUNNING
    with pytest.raises(InvalidArgument, match="not finished"):
        engine.completion(rid)


def test_budgets_are_checked():
    with pytest.raises(InvalidArgument, match="max_running"):
        Engine(model(), num_blocks=10, max_batch_tokens=4, max_running=8)
    with pytest.raises(InvalidArgument):
        Engine(model(), num_blocks=10, max_batch_tokens=0)


def test_a_scheduler_that_admits_nothing_is_reported_not_looped_on():
    class Stuck(Scheduler):
        def admit_waiting(self, plan):
            pass

    engine = Engine(model(), num_blocks=10, scheduler=Stuck)
    engine.add_request("abc")
    with pytest.raises(PagedKVError, match="cannot make progress"):
        engine.step()


@settings(max_examples=12, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 24), min_size=1, max_size=5),
    block_size=st.sampled_from([1, 3, 8]),
    spare_blocks=st.integers(0, 6),
    budget=st.integers(8, 64),
    eviction=st.sampled_from(sorted(POLICIES)),
    seed=st.integers(0, 2**16),
)
def test_any_budget_gives_the_dense_tokens(
    lengths, block_size, spare_blocks, budget, eviction, seed
):
    rng = random.Random(seed)
    shared = [rng.randrange(256) for _ in range(rng.randrange(0, 12))]
    prompts = [shared + [rng.randrange(256) for _ in range(n)] for n in lengths]
    new = 5
    longest = max(-(-(len(p) + new) // block_size) for p in prompts)
    engine = Engine(
        model(),
        num_blocks=longest + spare_blocks,
        block_size=block_size,
        eviction=eviction,
        max_batch_tokens=budget,
        max_running=min(budget, 4),
    )
    out = engine.generate(prompts, new)
    assert [c.token_ids for c in out] == [greedy_dense(model(), p, new) for p in prompts]


def test_the_demo_serves_requests_that_share_a_system_prompt(capsys):
    from paged_kv.__main__ import main

    main(["--requests", "3", "--new-tokens", "20", "--blocks", "8", "--eviction", "lfu"])
    out = capsys.readouterr().out
    assert "8 blocks of 16 tokens, lfu eviction" in out
    summary = out.split("lfu eviction\n")[1]
    rows = dict(line.strip().rsplit(maxsplit=1) for line in summary.splitlines())
    assert int(rows["generated tokens"]) == 60
    assert int(rows["prefill tokens saved (prefix hits)"]) > 0
    assert int(rows["preemptions"]) > 0


# Token id 0 is a token like any other: in prompts, appends, hashes, the engine and the byte
# tokenizer (it is the NUL byte). A falsy-value check (`if token:`, `0 < t`) anywhere would
# drop or refuse it.


class ZeroLovingLM(TinyLM):
    """TinyLM whose logits always favour token 0, so the engine generates zeros."""

    def forward(self, batch, kv):
        logits = super().forward(batch, kv).clone()
        logits[:, 0] = logits.max() + 100.0
        return logits


@cache
def zero_model() -> ZeroLovingLM:
    return ZeroLovingLM(seed=0)


def test_prompts_with_token_zero_are_served_like_any_other():
    prompts = [[0], [0, 0, 5], [7, 0, 0, 0, 0, 0, 0, 0, 0, 3]]
    engine = Engine(model(), num_blocks=30, block_size=4)
    arrays = [np.array([0, 0, 5]), torch.tensor([0])]
    out = engine.generate([*prompts, "a\x00b", *arrays], 6)
    assert [c.prompt_ids for c in out] == [*prompts, [97, 0, 98], [0, 0, 5], [0]]
    for completion in out:
        assert completion.token_ids == greedy_dense(model(), completion.prompt_ids, 6)


def test_generated_zeros_are_appended_stopped_on_and_decoded():
    engine = Engine(zero_model(), num_blocks=20, block_size=4)
    rid = engine.add_request([0, 0, 0], SamplingParams(6))
    engine.step()
    engine.step()  # the first zero is now appended to the cache
    assert engine.manager.token_ids(rid) == [0, 0, 0, 0]
    engine.run()
    completion = engine.completion(rid)
    assert completion.token_ids == [0] * 6
    assert completion.text == "\x00" * 6
    [stopped] = engine.generate([[9, 9]], 6, stop_token_ids=[0])
    assert stopped.token_ids == [0]  # 0 is a stop token like any other
    sampled = engine.generate([[9, 9]], 4, temperature=1.0, seed=3)
    assert sampled[0].token_ids == [0] * 4
    assert torch.equal(torch.tensor(sampled[0].token_ids), torch.zeros(4, dtype=torch.long))


# The serving layer's argument checks at their edges, and its documented defaults.


def test_one_new_token_means_one_step_and_one_token():
    engine = Engine(model(), num_blocks=8, block_size=4)
    rid = engine.add_request([3, 1, 4], SamplingParams(1))
    engine.step()
    assert not engine.has_unfinished()
    assert engine.completion(rid).token_ids == greedy_dense(model(), [3, 1, 4], 1)


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
        {"temperature": 1e-45},  # once a RuntimeError from multinomial, mid-step
        {"temperature": "1"},
        {"temperature": math.inf},
        {"temperature": 0.5, "seed": 1.5},
        {"temperature": 0.5, "seed": 2**70},
        {"temperature": 0.5, "seed": -1},
        {"temperature": 0.5, "seed": MAX_SEED},  # + 1 for the second prompt: too big
        {"salt": "\ud800"},  # once a UnicodeEncodeError while pricing, after queueing
        {"salt": 5},
        {"stop_token_ids": [-1]},
        {"stop_token_ids": 5},
        {"ignore_eos": 1},
    ],
)
def test_bad_generate_arguments_change_nothing(kwargs):
    engine = Engine(model(), num_blocks=8, block_size=4)
    rid = engine.add_request([1, 2], SamplingParams(3))
    engine.step()
    before = engine.stats()
    with pytest.raises(InvalidArgument):
        engine.generate([[5, 6], [7]], **kwargs)
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


@pytest.mark.parametrize(
    ("prompt", "match"),
    [
        (None, "a prompt is a str or a sequence"),
        (5, "a prompt is a str or a sequence"),
        ([2**63], "token ids"),  # once accepted, then a struct.error when its block filled
        ([256], r"0\.\.255"),  # beyond the vocabulary
        ([1.5], "token ids"),
        (["a"], "token ids"),
        ([], "empty"),
    ],
)
def test_a_bad_prompt_is_refused_before_it_is_queued(prompt, match):
    engine = Engine(model(), num_blocks=8, block_size=4)
    with pytest.raises(InvalidArgument, match=match):
        engine.add_request(prompt)
    with pytest.raises(InvalidArgument, match=match):
        engine.generate([[1, 2], prompt])
    assert not engine.requests and not engine.has_unfinished()
    assert engine.stats().requests == 0
    assert engine.generate([[1, 2]], max_new_tokens=2)[0].token_ids == greedy_dense(
        model(), [1, 2], 2
    )


def test_add_request_takes_sampling_params_only():
    engine = Engine(model(), num_blocks=8, block_size=4)
    with pytest.raises(InvalidArgument, match="SamplingParams"):
        engine.add_request([1, 2], cast(Any, {"max_new_tokens": 2}))
    assert not engine.requests


def test_a_str_is_one_prompt_and_a_list_of_ints_is_not_a_list_of_prompts():
    engine = Engine(model(), num_blocks=16, block_size=4)
    (one,) = engine.generate("hello", max_new_tokens=3)
    assert one.prompt_ids == list(b"hello")
    assert one.token_ids == engine.generate(["hello"], max_new_tokens=3)[0].token_ids
    with pytest.raises(InvalidArgument, match="list of prompts"):
        engine.generate(cast(Any, [1, 2, 3]))
    with pytest.raises(InvalidArgument, match="list of prompts"):
        engine.generate(cast(Any, None))
    assert not engine.has_unfinished()


def test_the_extreme_accepted_values_sample_finitely():
    assert SamplingParams(seed=MAX_SEED).seed == MAX_SEED
    assert SamplingParams(seed=0, stop_token_ids=cast(Any, [3])).stop_token_ids == (3,)
    engine = Engine(model(), num_blocks=16, block_size=4)
    (coldest,) = engine.generate([[1, 2, 3]], 4, temperature=MIN_TEMPERATURE, seed=MAX_SEED)
    assert coldest.token_ids == greedy_dense(model(), [1, 2, 3], 4)  # as good as greedy
    (hottest,) = engine.generate([[1, 2, 3]], 4, temperature=1e30, seed=0)
    assert all(0 <= t < 256 for t in hottest.token_ids)  # uniform, but finite


def test_a_completion_counts_its_first_admissions_prompt_hits_and_its_recomputed_tokens():
    # 14 blocks of 8 for 8 requests: preemptions, and readmissions whose hits (their own
    # generated tokens among them) exceed their prompts.
    prompts, _ = workload()
    engine = Engine(model(), num_blocks=14, block_size=8)
    out = engine.generate(prompts, 24)
    readmitted = [engine.requests[c.request_id].num_cached_tokens for c in out]
    assert any(hits >= len(p) for hits, p in zip(readmitted, prompts, strict=True)), "none"
    system = prompts[0][:40]  # five blocks of 8, shared by most prompts
    for c, prompt in zip(out, prompts, strict=True):
        assert c.num_cached_prompt_tokens in ((0, 40) if prompt[:40] == system else (0,)), c
        assert (c.num_recomputed_tokens > 0) == (c.num_preemptions > 0), c
    assert sum(c.num_cached_prompt_tokens > 0 for c in out) >= 4
    assert sum(c.num_recomputed_tokens for c in out) == engine.stats().recomputed_tokens > 0
