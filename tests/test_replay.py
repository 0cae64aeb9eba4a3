from paged_kv import KVCacheManager
from paged_kv.study.operations import Add, Append, Free, decode_workload, replay


def test_replay_keeps_a_snapshot_before_and_after_each_op():
    ops = [Add("a", (1, 2, 3)), Append("a", (4, 5)), Free("a")]
    snaps = replay(KVCacheManager(4, 2), ops)
    assert len(snaps) == 4
    assert [len(s.block_tables.get("a", ())) for s in snaps] == [0, 2, 3, 0]
    assert [op.describe() for op in ops] == [
        "add 'a' with a 3-token prompt",
        "append 2 token(s) to 'a'",
        "free 'a'",
    ]


def test_decode_workload_adds_decodes_and_frees_each_sequence_once():
    ops = decode_workload([("a", 3), ("b", 5)], decode_steps=4, finish_after={"a": 2})
    assert ops[:2] == [Add("a", (0, 1, 2)), Add("b", (0, 1, 2, 3, 4))]
    assert sum(isinstance(op, Append) and op.seq_id == "a" for op in ops) == 2
    assert sum(isinstance(op, Append) and op.seq_id == "b" for op in ops) == 4
    assert [op for op in ops if isinstance(op, Free)] == [Free("a"), Free("b")]
    manager = KVCacheManager(8, 2)
    replay(manager, ops)
    assert len(manager) == 0 and manager.pool.num_in_use == 0
