"""The replica-router simulator: seeded, routers behave as named, a shared tier adds hits."""

from __future__ import annotations

import itertools

import pytest

from paged_kv.errors import InvalidArgument
from paged_kv.study.replicas import (
    ReplicaRequest,
    multi_turn_workload,
    replica_study,
    shared_prompt_workload,
    simulate_replicas,
)


def test_workloads_are_seeded_and_chain_their_blocks():
    a, b = shared_prompt_workload(200, seed=3), shared_prompt_workload(200, seed=3)
    assert a == b and a != shared_prompt_workload(200, seed=4)
    assert all(x.arrival < y.arrival for x, y in itertools.pairwise(a))
    turns = multi_turn_workload(20, turns=3, seed=0)
    by_prefix = {}
    for r in turns:  # every later turn extends an earlier prompt of its session
        by_prefix[r.blocks] = r
    extended = sum(
        1 for r in turns if any(r.blocks[: len(p)] == p and r.blocks != p for p in by_prefix)
    )
    assert extended == 20 * 2


def test_round_robin_spreads_requests_evenly_and_prefix_routing_keeps_prefixes_together():
    requests = shared_prompt_workload(1500, rate=20.0, seed=0)
    rr = simulate_replicas(requests, 16, "round_robin")
    prefix = simulate_replicas(requests, 16, "prefix")
    assert rr.imbalance < 1.5
    assert prefix.device_hit_rate > rr.device_hit_rate + 0.15
    assert prefix.remote_hit_tokens == rr.remote_hit_tokens == 0


def test_the_load_bound_caps_how_much_prefix_routing_may_pile_on_one_replica():
    one_prompt = [
        ReplicaRequest(i * 0.01, (0, 1, 2, 3, 100 + i), 64) for i in range(600)
    ]  # every request wants the same replica
    unbounded = simulate_replicas(one_prompt, 8, "prefix", load_bound=1e9)
    bounded = simulate_replicas(one_prompt, 8, "prefix", load_bound=1.25)
    assert unbounded.imbalance == pytest.approx(8.0, rel=0.01)  # all on one replica
    assert bounded.imbalance < unbounded.imbalance / 2
    assert bounded.hit_rate > 0.5


def test_a_shared_tier_gives_the_plain_routers_their_hits_back():
    requests = shared_prompt_workload(1500, rate=30.0, seed=1)
    alone = simulate_replicas(requests, 32, "round_robin")
    shared = simulate_replicas(requests, 32, "round_robin", shared_blocks=8192)
    assert shared.device_hit_tokens == alone.device_hit_tokens
    assert shared.remote_hit_tokens > 0 and shared.hit_rate > alone.hit_rate + 0.2
    assert shared.mean_queued_tokens < alone.mean_queued_tokens


def test_the_study_covers_every_combination():
    reports = replica_study((8, 16), num_requests=300, shared_blocks=(0, 1024))
    assert len(reports) == 2 * 2 * 3 * 2
    assert {r.router for r in reports} == {"round_robin", "least_loaded", "prefix"}
    assert all(0 <= r.hit_rate <= 1 and r.imbalance >= 1 for r in reports)


def test_bad_arguments_name_what_to_pass():
    requests = shared_prompt_workload(10)
    with pytest.raises(InvalidArgument, match="router"):
        simulate_replicas(requests, 4, "random")
    with pytest.raises(InvalidArgument, match="load_bound"):
        simulate_replicas(requests, 4, "prefix", load_bound=0.5)
    with pytest.raises(InvalidArgument, match="num_replicas"):
        simulate_replicas(requests, 0, "prefix")
    with pytest.raises(InvalidArgument, match="remote_cost"):
        simulate_replicas(requests, 4, "prefix", remote_cost=2)
    with pytest.raises(InvalidArgument, match="workload"):
        replica_study((8,), workloads=("web",))
