from __future__ import annotations

import pytest

from paged_kv.study.workloads import (
    RATED_WORKLOADS,
    WORKLOADS,
    RatedTrace,
    _zipf_weights,
    prefixes_with_scans,
    shared_prefixes,
    shifting_popularity,
)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_traces_are_seeded(name):
    make = WORKLOADS[name]
    assert make(num_requests=300, seed=1) == make(num_requests=300, seed=1)
    assert make(num_requests=300, seed=1) != make(num_requests=300, seed=2)


def test_shared_prefixes_shape():
    trace = shared_prefixes(100, num_prefixes=10, prefix_blocks=3, unique_blocks=2, seed=0)
    assert len(trace) == 100 * 5
    prefixes = [tuple(trace[i : i + 3]) for i in range(0, len(trace), 5)]
    assert all(p[0] % 3 == 0 and p == (p[0], p[0] + 1, p[0] + 2) for p in prefixes)
    uniques = [k for i in range(0, len(trace), 5) for k in trace[i + 3 : i + 5]]
    assert len(set(uniques)) == len(uniques)  # a request's own blocks are never reused
    counts = [prefixes.count((3 * p, 3 * p + 1, 3 * p + 2)) for p in range(10)]
    assert counts[0] == max(counts)  # rank 0 is the most popular


def test_scans_are_one_off_bursts():
    base = shared_prefixes(100, seed=0)
    trace = prefixes_with_scans(100, scan_every=25, scan_blocks=50, seed=0)
    assert len(trace) == len(base) + 3 * 50
    extra = [k for k in trace if k not in set(base)]
    assert len(extra) == len(set(extra)) == 150


def test_popularity_shifts_to_new_prefixes_each_phase():
    trace = shifting_popularity(300, phases=3, num_prefixes=10, prefix_blocks=2, unique_blocks=1)
    thirds = [set(trace[i * 300 : (i + 1) * 300]) for i in range(3)]
    shared = lambda a, b: {k for k in a & b if k < 3 * 10 * 2}  # noqa: E731
    assert not shared(thirds[0], thirds[2])


def test_chat_sessions_resend_the_history_and_share_system_prompts():
    from paged_kv.study.token_chats import chat_sessions

    requests = chat_sessions(10, turns=3, num_system_prompts=2, system_tokens=8, seed=1)
    assert len(requests) == 30
    assert chat_sessions(10, turns=3, seed=1) == chat_sessions(10, turns=3, seed=1)
    heads = {tuple(prompt[:8]) for prompt, _ in requests}
    assert len(heads) <= 2  # every prompt starts with one of the system prompts
    # Some later prompt extends an earlier prompt + its answer: the conversation so far.
    extends = [
        any(p2[: len(p1) + len(a1)] == p1 + a1 for p2, _ in requests[i + 1 :])
        for i, (p1, a1) in enumerate(requests)
    ]
    assert sum(extends) == 20  # two of every session's three turns are continued


def test_multi_turn_chat_rereads_each_session_and_its_system_prompt():
    from paged_kv.study.workloads import multi_turn_chat

    trace = multi_turn_chat(
        200, num_system_prompts=50, system_blocks=4, active_sessions=4, user_blocks=1,
        answer_blocks=2, seed=3,
    )  # fmt: skip
    system = [k for k in trace if k < 50 * 4]
    assert len(system) % 4 == 0 and len(set(system)) < len(system)  # prompts are shared
    fresh = [k for k in trace if k >= 50 * 4]
    assert sorted(set(fresh)) == list(range(200, 200 + 200 * 3))  # 3 new blocks per request
    # Every new block but the last few sessions' is read again by its session's next turn.
    reused = {k for k in fresh if fresh.count(k) > 1}
    assert len(reused) > 0.5 * len(set(fresh))
    with pytest.raises(Exception, match="mean_turns"):
        multi_turn_chat(10, mean_turns=0.5)


# The A0 oracle on traces small enough to follow by hand, never above Belady,
# and the workloads' rates, which must describe the very traces the policies replay.


def final_rates(rated: RatedTrace) -> dict[int, float]:
    rates: dict[int, float] = {}
    for _, key, rate in rated.changes:
        rates[key] = rate
    return rates


def test_a_prefix_block_is_read_at_its_prefix_weight_and_a_private_one_never():
    rated = RATED_WORKLOADS["shared-prefixes"](300, num_prefixes=10, prefix_blocks=2, seed=0)
    rates, weights = final_rates(rated), _zipf_weights(10, 1.1)
    assert all(rates[k] == pytest.approx(weights[k // 2]) for k in rates if k < 20)
    assert all(rates[k] == 0.0 for k in rates if k >= 20)


def test_a_phase_retires_the_last_phase_prefixes():
    rated = RATED_WORKLOADS["shifting-popularity"](300, phases=3, num_prefixes=10, prefix_blocks=2)
    rates = final_rates(rated)
    assert all(rates.get(k, 0.0) == 0.0 for k in range(40))  # phases 0 and 1
    assert any(rates.get(k, 0.0) > 0 for k in range(40, 60))  # phase 2, still live


def test_chat_rates_add_up_to_the_open_sessions():
    sessions, mean_turns, prompts = 4, 3.0, 50
    rated = RATED_WORKLOADS["multi-turn-chat"](
        200, num_system_prompts=prompts, system_blocks=2, active_sessions=sessions,
        mean_turns=mean_turns, seed=2,
    )  # fmt: skip
    rates, weights = final_rates(rated), _zipf_weights(prompts, 1.0)
    # Each system prompt: its open sessions / 4 + its weight / mean_turns; summed over the
    # prompts, the open sessions' part is 1 (every session has one prompt).
    seen = {k // 2 for k in rates if k < 2 * prompts}
    open_part = sum(rates[2 * p] - weights[p] / mean_turns for p in seen)
    assert open_part == pytest.approx(1.0)
    # A session's own blocks: 1/4 while it has a turn to come, then 0.
    assert {rates[k] for k in rates if k >= 2 * prompts} == {0.0, 1 / sessions}
