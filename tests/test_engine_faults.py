"""A failed step never poisons the engine or its cache: seeded fault injection.

Faults are raised at a random stage in about one step in five (the model's forward pass after
its first layer wrote K/V, the decode attention, sampling, a tier call while pricing a
request, copying loaded blocks in, or saving computed ones), while requests that
share prefixes keep arriving. Every request that completes must have the tokens of a run
without faults (greedy ones: the cache-free `greedy_dense`), the manager's bookkeeping must
hold after every step, failed or not, and nothing may be left behind at the end.
"""

from __future__ import annotations

import math
import random
import threading
from collections import Counter, deque
from collections.abc import Callable
from functools import partial
from typing import Any, cast

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from test_manager import InjectedInterrupt, RecordedPolicy, Sites

from paged_kv.attention import paged_decode
from paged_kv.cache.manager import KVCacheManager
from paged_kv.cache.ref_count_pool import RefCountPool
from paged_kv.cache.snapshot import BlockState
from paged_kv.course.learner_manager import learner_manager
from paged_kv.errors import EngineBusy, InvalidArgument, InvalidModelOutput, PagedKVError
from paged_kv.serving.engine import Engine, StepRecord
from paged_kv.serving.model import TinyLM, greedy_dense
from paged_kv.serving.scheduler import Request, RequestStatus, SamplingParams, Scheduler, StepPlan
from paged_kv.tiers.host import HostTier
from paged_kv.tiers.store import TieredStore

BLOCK = 4
STAGES = ("forward", "attention", "sampling", "tier load", "tier copy", "tier save")


class InjectedFault(RuntimeError):
    """What the injected faults raise (a stand-in for a CUDA OOM or a tier's I/O error)."""


class Faults:
    """Arms one stage at a time; the armed stage raises the next time it runs."""

    def __init__(self) -> None:
        self.armed: str | None = None
        self.raised: Counter[str] = Counter()

    def hit(self, stage: str) -> None:
        if self.armed == stage:
            self.armed = None
            self.raised[stage] += 1
            raise InjectedFault(f"injected fault in {stage}")


def faulty_engine(model: TinyLM, faults: Faults, manager: str) -> Engine:
    """An engine whose forward pass, decode attention, sampling and store can fail."""

    def attention(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tables: torch.Tensor, lens: torch.Tensor
    ) -> torch.Tensor:
        faults.hit("attention")
        return paged_decode(q, k, v, tables, lens)

    store = TieredStore([HostTier(1 << 20)])
    engine = Engine(
        model,
        num_blocks=28,
        block_size=BLOCK,
        max_batch_tokens=24,
        max_running=3,
        attention=attention,
        store=store,
        manager_factory=MANAGERS[manager],
    )
    # After layer 0 wrote its K/V: a failure halfway through the forward pass.
    model.layers[1].register_forward_pre_hook(lambda *_: faults.hit("forward"))
    sample = engine._sample

    def sampling(logits: torch.Tensor, request: Request) -> int:
        token = sample(logits, request)  # the generator moved: a retry must draw the same
        faults.hit("sampling")
        return token

    engine._sample = sampling
    for name in ("load_run", "save"):  # a tier call while pricing, and after the forward
        setattr(store, name, _failing(getattr(store, name), f"tier {name[:4]}", faults))
    connector = engine.connector
    assert connector is not None  # loaded blocks reach the KV storage through write_blocks
    connector.write_blocks = _failing(connector.write_blocks, "tier copy", faults)
    return engine


def _failing(call: Callable[..., Any], stage: str, faults: Faults) -> Callable[..., Any]:
    def failing(*args: Any, **kwargs: Any) -> Any:
        faults.hit(stage)
        return call(*args, **kwargs)

    return failing


def check_bookkeeping(engine: Engine, num_blocks: int = 28) -> None:
    """The manager's invariants, and that it agrees with the scheduler's queues."""
    manager, scheduler = engine.manager, engine.scheduler
    running = {r.request_id for r in scheduler.running}
    assert set(manager.sequence_ids) == running
    assert all(r.status is RequestStatus.WAITING for r in scheduler.waiting)
    assert all(r.status is RequestStatus.RUNNING for r in scheduler.running)
    assert not running & {r.request_id for r in scheduler.waiting}
    refs: Counter[int] = Counter()
    for request in scheduler.running:
        seq = request.request_id
        refs.update(manager.block_table(seq))
        assert manager.token_ids(seq) == request.sequence.token_ids
        assert request.pending_token is not None  # every running request has its next token
    snap = manager.snapshot()
    for block in snap.blocks:
        assert block.ref_count == refs[block.block_id]
        cached = block.block_id in manager.pool.policy
        assert cached == (block.state is BlockState.CACHED)
    stats = manager.stats()
    assert stats.num_free_blocks + stats.num_in_use_blocks + stats.num_cached_blocks == num_blocks
    for request in scheduler.waiting:
        assert request.num_output_tokens < request.params.max_new_tokens


MANAGERS: dict[str, Callable[..., KVCacheManager]] = {
    "hash": KVCacheManager,
    "radix": partial(KVCacheManager, prefix_index="radix"),
    "your pool": partial(learner_manager, pool=RefCountPool),  # a learner-style pool below
}


@pytest.mark.parametrize("manager", sorted(MANAGERS))
def test_random_faults_never_change_a_completed_request_nor_leak(
    manager: str,
) -> None:
    rng = random.Random(25)
    model = TinyLM(seed=3)
    faults = Faults()
    engine = faulty_engine(model, faults, manager)
    stems = [[rng.randrange(256) for _ in range(12)] for _ in range(8)]
    prompts = [
        stems[i % 8][: rng.randrange(5, 13)] + [rng.randrange(256) for _ in range(rng.randrange(4))]
        for i in range(120)
    ]
    params = [
        SamplingParams(rng.randrange(2, 9), 0.0 if i % 3 else 0.8, seed=i)
        for i in range(len(prompts))
    ]
    ids: list[int] = []
    steps = failures = 0
    while len(ids) < len(prompts) or engine.has_unfinished():
        for _ in range(rng.choice((0, 0, 1, 2))):  # requests keep arriving
            if len(ids) < len(prompts):
                ids.append(engine.add_request(prompts[len(ids)], params[len(ids)]))
        if not engine.has_unfinished():
            continue
        if rng.random() < 0.2:
            faults.armed = rng.choice(STAGES)  # it fires at the next step that reaches it
        try:
            engine.step()
        except InjectedFault:
            failures += 1
        steps += 1
        check_bookkeeping(engine)
    faults.armed = None
    assert steps >= 200 and failures >= 30 and all(faults.raised[s] for s in STAGES)

    # Same requests, no faults, a fresh engine: what every request must have produced.
    clean = Engine(model, num_blocks=28, block_size=BLOCK, max_batch_tokens=24, max_running=3)
    clean_ids = [clean.add_request(p, q) for p, q in zip(prompts, params, strict=True)]
    clean.run()
    for rid, clean_id, prompt, p in zip(ids, clean_ids, prompts, params, strict=True):
        got = engine.completion(rid).token_ids
        if p.temperature == 0:
            assert got == greedy_dense(model, prompt, p.max_new_tokens), rid
        assert got == clean.completion(clean_id).token_ids, rid

    # Nothing leaked, and what stayed cached holds what it claims: served again, every prompt
    # (now mostly prefix hits) still gives the cache-free tokens.
    assert len(engine.manager) == 0 and engine.manager.pool.num_in_use == 0
    assert not engine.scheduler.waiting and not engine.scheduler.running
    again = engine.generate(prompts[:20], max_new_tokens=3)
    assert sum(c.num_cached_prompt_tokens for c in again) > 0
    for completion, prompt in zip(again, prompts, strict=False):
        assert completion.token_ids == greedy_dense(model, prompt, 3)


def _failing_attention(times: int) -> tuple[Callable[..., torch.Tensor], list[int]]:
    """A decode attention that raises its first `times` calls (a CUDA OOM, say)."""
    calls = [0]

    def attention(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tables: torch.Tensor, lens: torch.Tensor
    ) -> torch.Tensor:
        calls[0] += 1
        if calls[0] <= times:
            raise InjectedFault("out of memory")
        return paged_decode(q, k, v, tables, lens)

    return attention, calls


def test_a_failed_decode_step_is_retried_and_poisons_nothing() -> None:
    """Issue 25's first case: once, pending tokens stayed None and every later step raised,
    and blocks registered at admission were served as hits with K/V never written."""
    model = TinyLM(seed=1)
    prompt = list(range(40, 77))  # 37 tokens: 9 full blocks
    attention, _ = _failing_attention(times=1)
    engine = Engine(model, num_blocks=40, block_size=BLOCK, attention=attention)
    first = engine.add_request(prompt, SamplingParams(5))
    engine.step()  # its prefill: no decode yet
    second = engine.add_request(prompt, SamplingParams(5))
    with pytest.raises(InjectedFault):
        engine.step()  # the first's first decode, and the second's one-token prefill
    assert [r.request_id for r in engine.scheduler.waiting] == [first, second]  # in order
    assert [r.num_output_tokens for r in engine.scheduler.waiting] == [1, 0]
    assert engine.manager.num_prefix_hit_tokens(prompt) == 36  # its prefill wrote those
    engine.run()
    ids = [first, second]
    want = greedy_dense(model, prompt, 5)
    assert [engine.completion(i).token_ids for i in ids] == [want, want]
    (again,) = engine.generate([prompt], max_new_tokens=5)
    assert again.num_cached_prompt_tokens == 36 and again.token_ids == want


def test_a_failed_prefill_leaves_no_block_it_was_to_write_in_the_prefix_cache() -> None:
    model, faults = TinyLM(seed=1), Faults()
    model.layers[1].register_forward_pre_hook(lambda *_: faults.hit("forward"))
    engine = Engine(model, num_blocks=16, block_size=BLOCK)
    (first,) = engine.generate([list(range(9))], max_new_tokens=1)  # blocks 0-1 are written
    prompt = list(range(21))  # the same two blocks, then three more
    engine.add_request(prompt, SamplingParams(2))
    faults.armed = "forward"  # layer 0 wrote its K/V, layer 1 never ran
    with pytest.raises(InjectedFault):
        engine.step()
    assert engine.manager.num_prefix_hit_tokens(prompt) == 8  # only what earlier steps wrote
    assert len(engine.manager) == 0 and engine.manager.stats().num_cached_blocks == 2
    engine.run()
    assert engine.completion(1).token_ids == greedy_dense(model, prompt, 2)
    assert first.token_ids == greedy_dense(model, list(range(9)), 1)


def test_a_failed_draw_puts_every_generator_back() -> None:
    model, faults = TinyLM(seed=2), Faults()
    prompts = [[5, 6, 7], [8, 9]]
    clean = Engine(model, num_blocks=16, block_size=BLOCK)
    want = clean.generate(prompts, 6, temperature=0.9, seed=11)
    engine = Engine(model, num_blocks=16, block_size=BLOCK)
    sample, draws = engine._sample, [0]

    def second_draw_fails(logits: torch.Tensor, request: Request) -> int:
        token = sample(logits, request)  # the first request's generator has moved
        draws[0] += 1
        if draws[0] == 2:
            faults.armed = "sampling"
            faults.hit("sampling")
        return token

    engine._sample = second_draw_fails
    ids = [
        engine.add_request(p, SamplingParams(6, 0.9, seed=11 + i)) for i, p in enumerate(prompts)
    ]
    with pytest.raises(InjectedFault):
        engine.step()
    engine.run()
    assert [engine.completion(i).token_ids for i in ids] == [w.token_ids for w in want]


def test_a_generate_that_fails_leaves_nothing_queued_and_the_engine_serving() -> None:
    model = TinyLM(seed=1)
    attention, calls = _failing_attention(times=10**9)  # every decode fails
    engine = Engine(model, num_blocks=16, block_size=BLOCK, attention=attention)
    with pytest.raises(InjectedFault):
        engine.generate([[1, 2, 3], [4, 5]], max_new_tokens=3)
    assert calls[0] == 1 and not engine.has_unfinished()
    assert len(engine.manager) == 0 and engine.manager.pool.num_in_use == 0
    with pytest.raises(InvalidArgument, match="aborted"):
        engine.completion(0)
    (one,) = engine.generate([[1, 2, 3]], max_new_tokens=1)  # a prefill: no decode needed
    assert one.token_ids == greedy_dense(model, [1, 2, 3], 1)


def test_abort_drops_a_waiting_or_running_request_for_good() -> None:
    model = TinyLM(seed=1)
    engine = Engine(model, num_blocks=16, block_size=BLOCK)
    running = engine.add_request([1, 2, 3, 4, 5], SamplingParams(4))
    engine.step()
    waiting = engine.add_request([6, 7], SamplingParams(2))
    engine.abort(running)
    engine.abort(waiting)
    assert not engine.has_unfinished() and engine.manager.pool.num_in_use == 0
    assert engine.manager.stats().num_cached_blocks == 1  # the full block its prefill wrote
    for rid in (running, waiting):
        assert engine.requests[rid].status is RequestStatus.ABORTED
        with pytest.raises(InvalidArgument, match="aborted"):
            engine.abort(rid)
    with pytest.raises(InvalidArgument, match="no request 99"):
        engine.abort(99)
    with pytest.raises(InvalidArgument, match="no request"):
        engine.abort(cast(Any, []))  # unhashable


BAD_REQUESTS: list[tuple[object, dict[str, Any]]] = [
    (None, {}),
    (7, {}),
    ([2**63], {}),
    ([300], {}),
    ([], {}),
    ([1, 2], {"salt": "\ud800"}),
    ([1, 2], {"params": "greedy"}),
]
BAD_PARAMS: list[dict[str, Any]] = [
    {"temperature": 1e-45},
    {"temperature": "1"},
    {"temperature": math.inf},
    {"seed": 1.5},
    {"seed": 2**70},
    {"max_new_tokens": 0},
    {"stop_token_ids": (-1,)},
]


class EngineMachine(RuleBasedStateMachine):
    """Engine calls, valid and not, with steps that fail. After every refused call nothing
    observable changed; after a failed step every request kept its tokens; every greedy
    request that completes has the cache-free tokens."""

    model = TinyLM(seed=4)

    def __init__(self) -> None:
        super().__init__()
        self.faults = Faults()

        def attention(
            q: torch.Tensor,
            k: torch.Tensor,
            v: torch.Tensor,
            tables: torch.Tensor,
            lens: torch.Tensor,
        ) -> torch.Tensor:
            self.faults.hit("attention")
            return paged_decode(q, k, v, tables, lens)

        self.engine = Engine(
            self.model,
            num_blocks=12,
            block_size=BLOCK,
            max_batch_tokens=12,
            max_running=3,
            attention=attention,
        )
        self.hook = self.model.layers[0].register_forward_hook(
            lambda *_: self.faults.hit("forward")
        )
        self.checked: set[int] = set()

    def teardown(self) -> None:
        self.hook.remove()  # the model is the class's: this example's hook goes

    def observed(self) -> tuple[object, ...]:
        e = self.engine
        return (
            {rid: (r.status, r.output, r.num_tokens) for rid, r in e.requests.items()},
            [r.request_id for r in e.scheduler.waiting],
            [r.request_id for r in e.scheduler.running],
            e.manager.snapshot(),
            e.stats().requests,
            e.stats().steps,
        )

    @rule(
        prompt=st.lists(st.integers(0, 255), min_size=1, max_size=14),
        new=st.integers(1, 4),
        sampled=st.booleans(),
    )
    def add(self, prompt: list[int], new: int, sampled: bool) -> None:
        self.engine.add_request(prompt, SamplingParams(new, 0.7 if sampled else 0.0, seed=new))

    @rule(bad=st.sampled_from(BAD_REQUESTS + [([1, 2], {"params": p}) for p in BAD_PARAMS]))
    def add_refused(self, bad: tuple[object, dict[str, Any]]) -> None:
        prompt, kwargs = bad
        before = self.observed()
        with pytest.raises(PagedKVError):
            if "params" in kwargs and isinstance(kwargs["params"], dict):
                SamplingParams(**kwargs["params"])
            self.engine.add_request(cast(Any, prompt), **kwargs)
        assert self.observed() == before

    @rule(bad=st.sampled_from(BAD_PARAMS), many=st.booleans())
    def generate_refused(self, bad: dict[str, Any], many: bool) -> None:
        before = self.observed()
        with pytest.raises(PagedKVError):
            self.engine.generate([[1, 2, 3]] * (2 if many else 1), **bad)
        assert self.observed() == before

    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        ids = [*sorted(self.engine.requests), 10**6]
        rid = data.draw(st.sampled_from(ids))
        request = self.engine.requests.get(rid)
        if request is None or request.status in (RequestStatus.FINISHED, RequestStatus.ABORTED):
            before = self.observed()
            with pytest.raises(InvalidArgument):
                self.engine.abort(rid)
            assert self.observed() == before
        else:
            self.engine.abort(rid)

    @precondition(lambda self: self.engine.has_unfinished())
    @rule(fault=st.sampled_from([None, None, "forward", "attention"]))
    def step(self, fault: str | None) -> None:
        outputs = {rid: r.output for rid, r in self.engine.requests.items()}
        self.faults.armed = fault
        try:
            self.engine.step()
        except InjectedFault:
            now = {rid: r.output for rid, r in self.engine.requests.items()}
            assert now == outputs  # every request kept its tokens, the pending one too
        self.faults.armed = None

    @invariant()
    def bookkeeping_holds_and_completions_are_right(self) -> None:
        check_bookkeeping(self.engine, num_blocks=12)
        for rid, request in self.engine.requests.items():
            done = request.status is RequestStatus.FINISHED
            if done and rid not in self.checked and not request.params.temperature:
                want = greedy_dense(self.model, request.prompt, request.params.max_new_tokens)
                assert self.engine.completion(rid).token_ids == want
                self.checked.add(rid)


TestEngineMachine = EngineMachine.TestCase
TestEngineMachine.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)


# -- a fault at every call into someone else's code, and one thread at a time ---------------
# As in test_manager's fault test: each part the engine takes from its user (the eviction
# policy, the model's forward, the decode attention, the sampler, a Scheduler subclass, the
# tiered store) is wrapped so that every call into it is a counted site; a fault-free run
# lists the sites, then each site's first calls raise in turn (a KeyboardInterrupt or an
# Exception). The step that raised must keep every request's tokens and the bookkeeping, and
# the run must end with the tokens of an engine that never failed.


def _recorded_engine(sites: Sites, model: TinyLM) -> Engine:
    class RecordedScheduler(Scheduler):
        def schedule_running(self, plan: StepPlan) -> None:
            sites.enter("scheduler.schedule_running")
            super().schedule_running(plan)

        def admit_waiting(self, plan: StepPlan) -> None:
            sites.enter("scheduler.admit_waiting")
            super().admit_waiting(plan)

        def finish(self, request: Request) -> None:
            sites.enter("scheduler.finish")
            super().finish(request)

    def attention(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tables: torch.Tensor, lens: torch.Tensor
    ) -> torch.Tensor:
        sites.enter("attention")
        return paged_decode(q, k, v, tables, lens)

    store = TieredStore([HostTier(1 << 20)])
    for name in ("count_run", "load_run", "save"):
        setattr(store, name, sites.wrap(f"store.{name}", getattr(store, name)))
    engine = Engine(
        model,
        num_blocks=FAULT_BLOCKS,
        block_size=BLOCK,
        max_batch_tokens=16,
        max_running=2,
        eviction=RecordedPolicy(sites),
        scheduler=RecordedScheduler,
        attention=attention,
        store=store,
    )
    model.register_forward_pre_hook(lambda *_: sites.enter("model.forward"))
    model.layers[1].register_forward_pre_hook(lambda *_: sites.enter("model.layers[1]"))
    engine._sample = sites.wrap("sampler", engine._sample)
    return engine


FAULT_BLOCKS = 10
FAULT_PROMPTS = [[*range(30, 42), *range(t, t + 3)] for t in (1, 50, 90, 130, 170)] + [
    list(range(60, 69)),
    [*range(30, 42), 7],
]
FAULT_PARAMS = [SamplingParams(3, 0.8 if i % 3 == 1 else 0.0, seed=i) for i in range(7)]


def _faulted_engine_run(armed: tuple[str, int, BaseException] | None) -> tuple[Sites, list]:
    """The requests served step by step with `armed` (None: no fault), checking each step."""
    sites, model = Sites(), TinyLM(seed=5)
    engine = _recorded_engine(sites, model)
    ids = [engine.add_request(p, q) for p, q in zip(FAULT_PROMPTS, FAULT_PARAMS, strict=True)]
    sites.armed = armed
    while engine.has_unfinished():
        outputs = {rid: r.output for rid, r in engine.requests.items()}
        steps = engine.stats().steps
        try:
            with sites.active():
                engine.step()
        except BaseException as error:
            assert armed is not None and error is armed[2], error
            now = {rid: r.output for rid, r in engine.requests.items()}
            if engine.stats().steps == steps:  # failed before its tokens: all kept, none new
                assert now == outputs
            else:  # failed releasing a finished request: the step's tokens stand
                assert all(now[r][: len(outputs[r])] == outputs[r] for r in now)
        check_bookkeeping(engine, num_blocks=FAULT_BLOCKS)
    assert len(engine.manager) == 0 and engine.manager.pool.num_in_use == 0
    return sites, [engine.completion(rid).token_ids for rid in ids]


_ENGINE_SITES, _CLEAN_TOKENS = _faulted_engine_run(None)


def test_the_engine_fault_workload_reaches_every_part():
    assert {
        "policy.evict",
        "policy.revive",
        "attention",
        "model.forward",
        "sampler",
        "scheduler.finish",
        "store.load_run",
        "store.save",
    } <= set(_ENGINE_SITES.calls)
    model = TinyLM(seed=5)
    for prompt, params, tokens in zip(FAULT_PROMPTS, FAULT_PARAMS, _CLEAN_TOKENS, strict=True):
        if not params.temperature:
            assert tokens == greedy_dense(model, prompt, params.max_new_tokens)


@pytest.mark.parametrize(
    ("site", "n"),
    [
        (site, n)
        for site in sorted(_ENGINE_SITES.calls)
        for n in range(1, min(_ENGINE_SITES.calls[site], 2) + 1)
    ],
)
def test_a_fault_at_any_call_into_the_engines_parts_changes_no_token(site: str, n: int) -> None:
    error = InjectedInterrupt(site) if n % 2 else InjectedFault(site)
    sites, tokens = _faulted_engine_run((site, n, error))
    assert sites.armed is None  # it fired
    assert tokens == _CLEAN_TOKENS


def test_a_second_thread_is_refused_while_one_is_inside_a_step() -> None:
    """The first thread is held inside a step's decode attention (between planning and the
    forward pass's end); every changing call from a second thread raises `EngineBusy` and
    changes nothing, and the held step then finishes as if alone."""
    model = TinyLM(seed=1)
    inside, go_on, hold = threading.Event(), threading.Event(), [True]

    def attention(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tables: torch.Tensor, lens: torch.Tensor
    ) -> torch.Tensor:
        if hold[0]:
            hold[0] = False
            inside.set()
            assert go_on.wait(timeout=60)
        return paged_decode(q, k, v, tables, lens)

    engine = Engine(model, num_blocks=16, block_size=BLOCK, attention=attention)
    first = engine.add_request([1, 2, 3, 4, 5], SamplingParams(3))
    engine.step()  # its prefill: no decode attention yet
    errors: list[BaseException] = []

    def step() -> None:
        try:
            engine.step()
        except BaseException as error:  # reported to the test's thread
            errors.append(error)

    worker = threading.Thread(target=step)
    worker.start()
    try:
        assert inside.wait(timeout=60)
        before = (engine.manager.snapshot(), engine.requests[first].output, engine.stats())
        calls = [
            lambda: engine.abort(first),
            lambda: engine.add_request([9, 9]),
            engine.step,
            engine.run,
            lambda: engine.generate([[1, 2]], max_new_tokens=1),
        ]
        for call in calls:
            with pytest.raises(EngineBusy, match="another thread"):
                call()
        assert (engine.manager.snapshot(), engine.requests[first].output, engine.stats()) == (
            before
        )
        assert len(engine.requests) == 1 and engine.scheduler.waiting == deque()
    finally:
        go_on.set()
        worker.join(timeout=60)
    assert not errors and not worker.is_alive()
    engine.run()  # the lock was handed back: this thread may use the engine now
    assert engine.completion(first).token_ids == greedy_dense(model, [1, 2, 3, 4, 5], 3)


# -- what the model returns is checked; nested calls; interrupts in the engine's bookkeeping --

TWO_PROMPTS = ([1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 3, 4, 5, 6, 10, 11])


def _two_requests(model: TinyLM) -> tuple[Engine, list[int]]:
    engine = Engine(model, num_blocks=32, block_size=BLOCK)
    return engine, [engine.add_request(p, SamplingParams(6)) for p in TWO_PROMPTS]


def _serves_dense_tokens(engine: Engine, ids: list[int], model: TinyLM) -> None:
    engine.run()
    check_bookkeeping(engine, num_blocks=32)
    for rid, prompt in zip(ids, TWO_PROMPTS, strict=True):
        assert engine.completion(rid).token_ids == greedy_dense(model, prompt, 6)


def _out_of_vocabulary(logits: torch.Tensor) -> torch.Tensor:
    wide = torch.full((logits.shape[0], 300), -1e9)
    wide[:, :256], wide[:, 280] = logits, 1e9  # argmax: a token id the vocabulary lacks
    return wide


BAD_LOGITS: dict[str, Callable[[torch.Tensor], Any]] = {
    "too few rows": lambda x: x[:1],
    "too many rows": lambda x: torch.cat([x, x]),
    "one dimension": lambda x: x[0],
    "three dimensions": lambda x: x[None],
    "wider than the vocabulary": _out_of_vocabulary,
    "narrower than the vocabulary": lambda x: x[:, :100],
    "integer dtype": lambda x: x.long(),
    "not a tensor": lambda x: x.tolist(),
}


@pytest.mark.parametrize("bad", sorted(BAD_LOGITS))
def test_bad_logits_are_refused_before_anything_is_recorded_and_the_next_step_serves(
    bad: str,
) -> None:
    """One step's model output is wrong: a typed error naming the expected shape, the step
    rolled back (tokens, queues, blocks), and the next run serves dense decoding's tokens."""
    model, calls = TinyLM(seed=0), [0]

    def forward_hook(_module: Any, _args: Any, logits: torch.Tensor) -> Any:
        calls[0] += 1
        return BAD_LOGITS[bad](logits) if calls[0] == 3 else None

    handle = model.register_forward_hook(forward_hook)
    engine, ids = _two_requests(model)
    engine.step()
    engine.step()
    outputs, stats = [engine.requests[r].output for r in ids], engine.stats()
    with pytest.raises(InvalidModelOutput, match=r"expected (shape|a tensor of logits of shape) "):
        engine.step()
    assert [engine.requests[r].output for r in ids] == outputs
    assert engine.stats() == stats and len(engine.timeline) == 2
    assert [r.request_id for r in engine.scheduler.waiting] == ids  # back to waiting, in order
    check_bookkeeping(engine, num_blocks=32)
    handle.remove()
    _serves_dense_tokens(engine, ids, model)


@pytest.mark.parametrize("token", [256, -1, 3.0, True])
def test_a_sampled_id_outside_the_vocabulary_is_refused_and_rolled_back(token: object) -> None:
    model = TinyLM(seed=0)
    engine = Engine(model, num_blocks=32, block_size=BLOCK)
    rid = engine.add_request([1, 2, 3], SamplingParams(4, temperature=1.0, seed=3))
    engine._sample = lambda logits, request: token  # type: ignore[method-assign]
    with pytest.raises(InvalidModelOutput, match=r"token ids are ints in 0\.\.255"):
        engine.step()
    assert engine.requests[rid].output == [] and engine.stats().steps == 0
    check_bookkeeping(engine, num_blocks=32)


def test_a_step_called_back_from_inside_a_step_is_refused_before_anything_changes() -> None:
    """The model calls back into its engine: step, run and generate raise `EngineBusy` and
    change nothing; add_request queues; abort refuses a request the step is computing and
    drops a waiting one. The step itself then finishes as if nothing had been called."""
    model, engine_of = TinyLM(seed=0), []
    seen: list[tuple[str, str]] = []

    def forward_hook(*_: Any) -> None:
        engine = engine_of[0]
        before = (engine.manager.snapshot(), engine.stats(), len(engine.requests))
        for name, call in [
            ("step", engine.step),
            ("run", engine.run),
            ("generate", lambda: engine.generate([[1, 2]], max_new_tokens=1)),
            ("abort", lambda: engine.abort(ids[0])),
        ]:
            with pytest.raises(EngineBusy, match="inside a step") as error:
                call()
            seen.append((name, str(error.value)))
        assert (engine.manager.snapshot(), engine.stats(), len(engine.requests)) == before
        late.append(engine.add_request([7, 8, 9], SamplingParams(2)))
        engine.abort(late.pop())  # still waiting: dropped
        handle.remove()

    late: list[int] = []
    handle = model.register_forward_pre_hook(forward_hook)
    engine, ids = _two_requests(model)
    engine_of.append(engine)
    _serves_dense_tokens(engine, ids, model)
    assert [name for name, _ in seen] == ["step", "run", "generate", "abort"]
    assert engine.requests[2].status is RequestStatus.ABORTED


def test_a_prompt_that_is_not_valid_text_is_an_invalid_argument() -> None:
    engine = Engine(TinyLM(seed=0), num_blocks=8, block_size=BLOCK)
    for prompt in ("a\udc80", "\ud800"):
        with pytest.raises(InvalidArgument, match="surrogate"):
            engine.add_request(prompt)
        with pytest.raises(InvalidArgument, match="surrogate"):
            engine.generate([prompt])
    assert not engine.requests and not engine.has_unfinished()


class _InterruptedOnce(deque[StepRecord]):
    """A timeline whose next append is interrupted (a Ctrl-C in the engine's bookkeeping)."""

    fired = False

    def append(self, item: StepRecord) -> None:
        if not self.fired:
            self.fired = True
            raise InjectedInterrupt("in the timeline")
        super().append(item)


def test_an_interrupt_in_the_engines_bookkeeping_loses_no_token() -> None:
    model = TinyLM(seed=0)
    engine, ids = _two_requests(model)
    engine.step()
    engine.timeline = _InterruptedOnce(engine.timeline)
    with pytest.raises(InjectedInterrupt):
        engine.step()
    check_bookkeeping(engine, num_blocks=32)  # the step's tokens were recorded first
    _serves_dense_tokens(engine, ids, model)


def test_an_interrupt_while_recording_a_steps_tokens_heals_at_the_next_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Cut short after its forward pass, between two requests' tokens: the next step sends
    the request left without a token back to waiting, and its readmission computes it."""
    model, record_sample = TinyLM(seed=0), Request.record_sample
    calls = [0]

    def interrupted(request: Request, token: int) -> None:
        calls[0] += 1
        if calls[0] == 4:  # the second request of the second step
            raise InjectedInterrupt("between two requests' tokens")
        record_sample(request, token)

    monkeypatch.setattr(Request, "record_sample", interrupted)
    engine, ids = _two_requests(model)
    engine.step()
    with pytest.raises(InjectedInterrupt):
        engine.step()
    plan = engine.step()
    assert [(c.request.request_id, c.admitted) for c in plan.chunks] == [(0, False), (1, True)]
    _serves_dense_tokens(engine, ids, model)
