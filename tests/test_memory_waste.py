import numpy as np
import pytest

from paged_kv import InvalidArgument
from paged_kv.study.memory_waste import (
    SCHEMES,
    Request,
    _ContiguousArena,
    memory_waste_study,
    next_pow2,
    reservation,
    simulate_memory_waste,
    synthetic_requests,
)


@pytest.mark.parametrize(
    ("profile", "mean_in", "mean_out"), [("sharegpt", 161, 338), ("alpaca", 19, 58)]
)
def test_synthetic_lengths_have_the_profile_means(profile, mean_in, mean_out):
    reqs = synthetic_requests(profile, 20_000, seed=1)
    assert np.mean([r.prompt_len for r in reqs]) == pytest.approx(mean_in, rel=0.08)
    assert np.mean([r.output_len for r in reqs]) == pytest.approx(mean_out, rel=0.08)
    assert all(r.prompt_len >= 1 and r.output_len >= 1 and r.final_len <= 2048 for r in reqs)


def test_synthetic_requests_are_seeded():
    assert synthetic_requests("sharegpt", 50, seed=3) == synthetic_requests("sharegpt", 50, seed=3)
    assert synthetic_requests("sharegpt", 50, seed=3) != synthetic_requests("sharegpt", 50, seed=4)


def test_reservations():
    r = Request(100, 30)
    assert next_pow2(130) == 256 and next_pow2(128) == 128
    assert [reservation(s, r, 2048) for s in ("max", "pow2", "oracle")] == [2048, 132, 130]
    # Orca (Pow2) rounds only the output's room (30 -> 32) and adds the prompt; never past max_len
    assert reservation("pow2", Request(2000, 40), 2048) == 2048
    assert reservation("pow2", Request(3, 64), 2048) == 67


def test_arena_is_first_fit_and_reuses_gaps():
    arena = _ContiguousArena(10)
    assert [arena.allocate(3), arena.allocate(3), arena.allocate(3)] == [0, 3, 6]
    assert arena.allocate(2) is None  # 1 slot left at the end
    arena.free(3)
    assert arena.allocate(2) == 3  # the first gap that fits
    assert arena.allocate(2) is None  # gap of 1 at 5 and 1 at 9: external fragmentation


def test_a_hand_checked_contiguous_run():
    # Budget 8, max_len 4: only two requests of reservation 4 fit; a third waits.
    reqs = [Request(1, 2), Request(2, 2), Request(1, 1)]
    rep = simulate_memory_waste(reqs, "max", budget_tokens=8, max_len=4)
    # Two saturated steps. Step 1: lengths 2, 3 of finals 3, 4 in reservations of 4.
    # Step 2: lengths 3, 4; then both finish and the third runs alone (not measured).
    assert rep.token_states == pytest.approx((5 + 7) / 2 / 8)
    assert rep.reserved == pytest.approx((2 + 0) / 2 / 8)
    assert rep.internal_fragmentation == pytest.approx(1 / 8)
    assert rep.external_fragmentation == pytest.approx(0)
    assert rep.mean_running == 2 and rep.preemptions == 0


def test_study_orders_the_schemes_like_the_paper():
    reqs = synthetic_requests("sharegpt", 300, seed=0)
    reports = {r.scheme: r for r in memory_waste_study(reqs, budget_tokens=16_384)}
    assert list(reports) == list(SCHEMES)
    shares = [reports[s].token_states for s in SCHEMES]
    assert shares == sorted(shares)  # max < pow2 < oracle < paged
    assert reports["paged"].token_states > 0.9
    assert reports["paged"].mean_running > 2 * reports["oracle"].mean_running
    for r in reports.values():
        total = r.token_states + r.reserved + r.internal_fragmentation + r.external_fragmentation
        assert total == pytest.approx(1)


def test_paged_preempts_when_decode_runs_out_of_blocks():
    reqs = [Request(4, 12)] * 4
    rep = simulate_memory_waste(reqs, "paged", budget_tokens=32, max_len=32, block_size=4)
    assert rep.preemptions > 0 and rep.token_states > 0


def test_bad_arguments():
    with pytest.raises(InvalidArgument):
        synthetic_requests("nope", 3)
    with pytest.raises(InvalidArgument):
        simulate_memory_waste([Request(10, 10)], "max", budget_tokens=100, max_len=2048)
    with pytest.raises(InvalidArgument):
        simulate_memory_waste([Request(10, 10)], "lifo", budget_tokens=10_000)
