"""A failed step never poisons the engine or its cache: seeded fault injection.

Faults are raised at a random stage in about one step in five (the model's forward pass after
its first layer wrote K/V, the decode attention, sampling, a tier call while pricing a
request, copying loaded blocks in, or saving computed ones), while requests that
share prefixes keep arriving. Every request that completes must have the tokens of a run
without faults (greedy ones: the cache-free `greedy_dense`), the manager's bookkeeping must
hold after every step, failed or not, and nothing may be left behind at the end.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
import torch

from paged_kv.attention import paged_decode
from paged_kv.cache.manager import KVCacheManager
from paged_kv.cache.prefix_index import PrefixIndexName
from paged_kv.cache.snapshot import BlockState
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import TinyLM, greedy_dense
from paged_kv.serving.scheduler import Request, RequestStatus, SamplingParams
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


def faulty_engine(model: TinyLM, faults: Faults, prefix_index: PrefixIndexName) -> Engine:
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
        manager_factory=partial(KVCacheManager, prefix_index=prefix_index),
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


def check_bookkeeping(engine: Engine) -> None:
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
    assert stats.num_free_blocks + stats.num_in_use_blocks + stats.num_cached_blocks == 28
    for request in scheduler.waiting:
        assert request.num_output_tokens < request.params.max_new_tokens


@pytest.mark.parametrize("prefix_index", ["hash", "radix"])
def test_random_faults_never_change_a_completed_request_nor_leak(
    prefix_index: PrefixIndexName,
) -> None:
    rng = random.Random(25)
    model = TinyLM(seed=3)
    faults = Faults()
    engine = faulty_engine(model, faults, prefix_index)
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
