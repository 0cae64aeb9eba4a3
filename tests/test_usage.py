"""paged_kv.cache.usage: the manager's `stats()`, kept in O(1), against a recount."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paged_kv import KVCacheManager, OutOfBlocks

# `KVCacheManager.stats()` keeps running counts; they must equal a recount from the block
# tables after any mix of adds, appends, forks, frees and preemptions (free the newest, add it
# back later with its generated tokens, as the scheduler's recompute does).


BS = 4


def assert_stats_match_a_recount(m: KVCacheManager) -> None:
    seqs = m.sequence_ids
    tables = {s: m.block_table(s) for s in seqs}
    tokens = sum(m.num_tokens(s) for s in seqs)
    table_blocks = sum(len(t) for t in tables.values())
    distinct = set().union(*tables.values()) if tables else set()
    slots = table_blocks * m.block_size
    stats = m.stats()
    assert stats.num_sequences == len(seqs)
    assert stats.num_tokens == tokens
    assert stats.num_table_blocks == table_blocks
    assert stats.num_in_use_blocks == len(distinct)
    assert stats.blocks_saved_by_sharing == table_blocks - len(distinct)
    unfilled = sum(len(tables[s]) * m.block_size - m.num_tokens(s) for s in seqs)
    expected = unfilled / slots if slots else 0.0
    assert stats.internal_fragmentation == pytest.approx(expected, abs=1e-12)
    assert stats.num_free_blocks + stats.num_in_use_blocks + stats.num_cached_blocks == (
        stats.num_blocks
    )


OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "append", "fork", "free", "preempt", "readmit"]),
        st.integers(0, 2**16),
        st.integers(1, 11),
    ),
    max_size=40,
)


@settings(max_examples=120, deadline=None)
@given(ops=OPS, num_blocks=st.sampled_from([6, 12, 24]))
def test_stats_equal_a_recount_after_any_operations(ops, num_blocks):
    m = KVCacheManager(num_blocks, BS)
    next_id = 0
    preempted: list[list[int]] = []  # tokens of preempted sequences, to be readmitted
    for op, pick, n in ops:
        seqs = m.sequence_ids
        before = m.stats()
        try:
            if op == "add" or (op == "readmit" and preempted):
                # Prompts from three stems, so prefixes are shared and hit.
                prompt = preempted.pop(0) if op == "readmit" else [pick % 3] * 4 + [9] * n
                m.add_sequence(next_id, prompt)
                next_id += 1
            elif op == "append" and seqs:
                m.append_tokens(seqs[pick % len(seqs)], [pick % 5] * n)
            elif op == "fork" and seqs:
                m.fork(seqs[pick % len(seqs)], next_id)
                next_id += 1
            elif op == "free" and seqs:
                m.free_sequence(seqs[pick % len(seqs)])
            elif op == "preempt" and seqs:
                victim = seqs[-1]  # the newest, as the scheduler picks
                preempted.append(m.token_ids(victim))
                m.free_sequence(victim)
        except OutOfBlocks:
            assert m.stats() == before  # a refused call counts nothing
        m.pop_block_copies()
        assert_stats_match_a_recount(m)


def test_a_fork_shares_and_copy_on_write_unshares_in_the_counts():
    m = KVCacheManager(16, BS)
    m.add_sequence("a", list(range(10)))  # 3 blocks, the last holding 2 of 4
    m.fork("a", "b")
    m.fork("a", "c")
    stats = m.stats()
    assert (stats.num_table_blocks, stats.num_in_use_blocks) == (9, 3)
    assert stats.blocks_saved_by_sharing == 6
    assert stats.internal_fragmentation == pytest.approx(1 - 30 / 36)
    m.append_tokens("b", [1])  # copies the shared last block
    assert m.stats().blocks_saved_by_sharing == 5
    assert_stats_match_a_recount(m)
    m.free_sequence("a")
    assert m.stats().blocks_saved_by_sharing == 2  # c still shares the first two with b
    assert_stats_match_a_recount(m)
    m.free_sequence("b")
    m.free_sequence("c")
    stats = m.stats()
    assert (stats.num_table_blocks, stats.blocks_saved_by_sharing) == (0, 0)
    assert stats.internal_fragmentation == 0.0
    assert_stats_match_a_recount(m)


def test_stats_equal_a_recount_after_every_engine_step_under_preemption():
    from paged_kv.serving import Engine, SamplingParams, TinyLM

    engine = Engine(TinyLM(seed=0), num_blocks=7, block_size=4, max_batch_tokens=32)
    system = list(range(30, 42))
    for i in range(6):
        engine.add_request([*system, i, i + 1], SamplingParams(8))
    while engine.has_unfinished():
        engine.step()
        assert_stats_match_a_recount(engine.manager)
    assert engine.stats().preemptions, "the cache is tight enough to preempt"
    assert engine.stats().prefill_tokens_saved, "and prefix hits happen"
