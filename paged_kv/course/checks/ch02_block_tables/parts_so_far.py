"""Chapter 02's "your parts so far": the learner's manager on the learner's chapter-01 pool
serves a decode workload without two sequences ever sharing a slot."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from paged_kv.cache.block_pool import BlockPool
from paged_kv.course.checks.ch02_block_tables.manager_trials import (
    expect_enough_blocks,
    fail_unless,
    manager_name,
)
from paged_kv.course.checks.failures import exercise, passed, short_repr
from paged_kv.course.checks.replay import Replay, fixed


@exercise(None, "your parts so far")
def check_parts_so_far(manager_cls: Callable[[Any], Any], pool_cls: Callable[..., Any]) -> None:
    """Your manager on your chapter-01 pool serves a decode workload: after every operation no
    two live sequences share a slot, every token has one, and the pool counts what the
    library's KVCacheManager counts."""
    from paged_kv.cache.manager import KVCacheManager
    from paged_kv.study.operations import Add, Append, decode_workload

    ops = decode_workload(
        [("a", 6), ("b", 3), ("c", 9), ("d", 13)], decode_steps=14, finish_after={"b": 3, "c": 8}
    )
    pool_name = getattr(pool_cls, "__name__", "Pool")

    def scenario(r: Replay) -> None:
        pool = r.run(f"pool = {pool_name}(16, 4)", pool_cls, 16, 4)
        m = r.run(f"manager = {manager_name(manager_cls)}(pool)", manager_cls, pool)
        ours = KVCacheManager(16, 4, prefix_caching=False)
        for op in ops:
            if isinstance(op, Add):
                r.run(
                    f"manager.add_sequence({op.seq_id!r}, {list(op.token_ids)})",
                    m.add_sequence,
                    op.seq_id,
                    list(op.token_ids),
                )
            elif isinstance(op, Append):
                r.run(
                    f"manager.append_tokens({op.seq_id!r}, {list(op.token_ids)})",
                    m.append_tokens,
                    op.seq_id,
                    list(op.token_ids),
                )
            else:
                r.run(f"manager.free_sequence({op.seq_id!r})", m.free_sequence, op.seq_id)
            op.apply(ours)
            seen: dict[int, str] = {}
            for seq in ours.sequence_ids:
                table = expect_enough_blocks(r, m, seq, ours.num_tokens(seq), 4)
                slots = r.read(f"manager.slot_mapping({seq!r})", m.slot_mapping, seq)
                fail_unless(
                    r,
                    len(slots) == ours.num_tokens(seq),
                    "slot count",
                    f"{seq!r} has {ours.num_tokens(seq)} tokens but {len(slots)} slots",
                )
                _one_slot_per_token(r, seq, list(table), list(slots))
                for slot in slots:
                    fail_unless(
                        r,
                        slot not in seen,
                        "shared slot",
                        f"slot {slot} belongs to both "
                        f"{seen.get(slot)!r} and {seq!r}: their K/V would overwrite each "
                        "other",
                    )
                    seen[slot] = seq
            free = r.read("pool.num_free", lambda: pool.num_free)
            fail_unless(
                r,
                free == ours.pool.num_free,
                "num_free",
                f"the pool should have {ours.pool.num_free} free blocks, it has {free}",
            )

    fixed("Every step of the check", scenario, Replay())
    if pool_cls is BlockPool:
        pool_name = "the library's BlockPool (no pool of yours saved with parts.save in chapter 01)"
    passed(f"your manager on {pool_name}: {len(ops)} operations, no slot shared")


def _one_slot_per_token(r: Replay, seq: str, table: list[int], slots: list[int]) -> None:
    """No two tokens of `seq` share a slot; if two do, say whether its table holds a block
    twice or the slots are computed wrong."""
    taken = [slot for slot, count in Counter(slots).items() if count > 1]
    if not taken:
        return
    twice = [b for b, count in Counter(table).items() if count > 1]
    why = (
        f"its table {table} holds block {twice[0]} twice (did the pool hand it out twice?)"
        if twice
        else f"`manager.slot_mapping({seq!r})` is {short_repr(slots, 120)}, but token t is at "
        "offset t % block_size of block table[t // block_size]"
    )
    r.fail(
        "slot taken twice", f"two tokens of sequence {seq!r} map to the same slot {taken[0]}: {why}"
    )
