"""The manager under test, on a pool that records its releases: what chapter 02's checks
expect of a table, an append and a refusal, and random add / append / free runs compared with
the library's `KVCacheManager` after every call.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from paged_kv.cache.block_pool import BlockPool
from paged_kv.cache.block_table import blocks_needed as reference_blocks_needed
from paged_kv.course.checks.failures import short_repr
from paged_kv.course.checks.replay import Failure, Replay
from paged_kv.errors import OutOfBlocks, UnknownSequence


class RecordingPool(BlockPool):
    """A `BlockPool` that remembers every block released, in order (for the tail-first rule)."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self.released: list[int] = []

    def release(self, block_ids: Any) -> list[int]:
        ids = list(block_ids)
        freed = super().release(ids)
        self.released += ids
        return freed


def manager_name(cls: Any) -> str:
    return getattr(getattr(cls, "func", cls), "__name__", "Manager")


def fail_unless(r: Replay, ok: bool, cause: str, message: str) -> None:
    if not ok:
        r.fail(cause, message)


def expect_unchanged(r: Replay, pool: BlockPool, free_before: int, why: str) -> None:
    fail_unless(
        r,
        pool.num_free == free_before,
        f"changed: {why}",
        f"{why}; the pool had "
        f"{free_before} free blocks before that line and has {pool.num_free} now",
    )


def run_with_tokens(
    r: Replay, line: str, method: str, fn: Callable[..., Any], seq: str, tokens: list
) -> Any:
    """`line`, which calls `manager.<method>(seq, tokens)`, run on a copy of `tokens` that it
    must leave as it was (the caller keeps using its list; the check goes on with `tokens`)."""
    given = list(tokens)
    out = r.run(line, fn, seq, given)
    fail_unless(
        r,
        given == tokens,
        f"{method} changed the token_ids",
        f"{method} changed the token_ids list it was given: after `{line}` the list is "
        f"{short_repr(given, 80)}. The list is the caller's, who keeps using it; read it "
        "(len(token_ids)), never change it",
    )
    return out


def expect_not_recorded(r: Replay, line: str, fn: Callable[..., Any], seq: str) -> None:
    """`line` (a read of `seq`, whose add was refused) raises UnknownSequence."""
    try:
        r.raises(UnknownSequence, line, fn, seq)
    except Failure as failure:
        if "no UnknownSequence" not in failure.cause:
            raise
        raise Failure(
            failure.cause,
            f"{failure.message}: a refused add must not record the sequence (record it only "
            "once the pool has given its blocks)",
        ) from None


def expect_copy(r: Replay, m: Any, seq: str) -> None:
    """`block_table(seq)` returns a copy: changing it leaves the manager's table as it was."""
    got = r.read(f"manager.block_table({seq!r})", m.block_table, seq)
    if not isinstance(got, list):
        return  # the type is named where the table is compared
    before = list(got)
    got.append(99)
    r.note(f"manager.block_table({seq!r}).append(99)  # the caller's copy: yours must not change")
    after = r.read(f"manager.block_table({seq!r})", m.block_table, seq)
    fail_unless(
        r,
        list(after) == before,
        "block_table not a copy",
        "block_table must return a copy: the caller changed your table (appending 99 to what "
        f"`manager.block_table({seq!r})` returned made the manager's table {list(after)}); "
        "return list(table)",
    )


def expect_enough_blocks(r: Replay, m: Any, seq: str, n: int, size: int) -> list[int]:
    """The table of `seq` (returned) has a block for each of its `n` tokens."""
    table = r.read(f"manager.block_table({seq!r})", m.block_table, seq)
    need = reference_blocks_needed(n, size)
    fail_unless(
        r,
        len(table) >= need,
        "too few blocks",
        f"the table of {seq!r} is {table}: {len(table)} block(s) for {n} tokens, but blocks of "
        f"{size} need {need} (round up: a partly filled block is still a block), so some "
        "tokens have no slot",
    )
    return table


def expect_table(
    r: Replay, m: Any, pool: BlockPool, seq: str, table: Any, n: int, others: set[int]
) -> None:
    want = reference_blocks_needed(n, pool.block_size)
    fail_unless(
        r,
        isinstance(table, list),
        "table type",
        f"add_sequence should return the block table (a list of block ids), got {table!r}",
    )
    fail_unless(
        r,
        len(table) == want,
        "table length",
        f"{n} tokens in blocks of {pool.block_size} need {want} blocks; the table is {table}",
    )
    fail_unless(
        r,
        len(set(table)) == len(table) and not set(table) & others,
        "table ids",
        f"the table {table} must hold distinct blocks that no other sequence holds "
        f"({sorted(others)})",
    )
    in_use = [b for b in table if pool.ref_count(b) == 0]
    fail_unless(
        r,
        not in_use,
        "table not allocated",
        f"blocks {in_use} of the table were never allocated from the pool",
    )
    got = r.read(f"manager.block_table({seq!r})", m.block_table, seq)
    fail_unless(
        r,
        list(got) == table,
        "block_table",
        f"block_table({seq!r}) is {got}, but add_sequence returned {table}",
    )
    tokens = r.read(f"manager.num_tokens({seq!r})", m.num_tokens, seq)
    fail_unless(r, tokens == n, "num_tokens", f"num_tokens({seq!r}) should be {n}, got {tokens}")


def manager_ops(rng: random.Random) -> list[Any]:
    """A pool (blocks, block size), then intents: ("add", length), ("append", k, pick),
    ("free", pick)."""
    ops: list[Any] = [(rng.randint(1, 16), rng.randint(1, 5))]
    for _ in range(40):
        kind = rng.choice(["add", "add", "append", "append", "append", "free"])
        ops.append((kind, rng.randint(1, 14), rng.random()))
    return ops


def run_manager(manager_cls: Callable[[Any], Any], *, appends: bool) -> Any:
    """Apply the intents to the learner's manager (on a RecordingPool) and to the library's
    KVCacheManager; compare what fits, tables' lengths, token counts and free blocks."""
    from paged_kv.cache.manager import KVCacheManager

    def run(ops: list[Any], r: Replay) -> None:
        num_blocks, size = ops[0]
        pool = RecordingPool(num_blocks, size)
        r.note(f"pool = BlockPool({num_blocks}, {size})")
        m = r.run(f"manager = {manager_name(manager_cls)}(pool)", manager_cls, pool)
        ours = KVCacheManager(num_blocks, size, prefix_caching=False)
        live: list[str] = []
        next_id = 0
        for kind, k, pick in ops[1:]:
            if kind == "add":
                seq = f"s{next_id}"
                next_id += 1
                line = f"manager.add_sequence({seq!r}, list(range({k})))"
                if not ours.can_allocate(k):
                    err = r.raises(OutOfBlocks, line, m.add_sequence, seq, list(range(k)))
                    expect_not_recorded(r, f"manager.num_tokens({seq!r})", m.num_tokens, seq)
                    want = (reference_blocks_needed(k, size), ours.pool.num_free)
                    fail_unless(
                        r,
                        (err.requested, err.available) == want,
                        "OutOfBlocks fields",
                        f"OutOfBlocks should say requested={want[0]}, available={want[1]}"
                        f"; yours says requested={err.requested}, available="
                        f"{err.available}",
                    )
                else:
                    table = run_with_tokens(
                        r, line, "add_sequence", m.add_sequence, seq, list(range(k))
                    )
                    others = {b for s in live for b in m.block_table(s)}
                    expect_table(r, m, pool, seq, table, k, others)
                    ours.add_sequence(seq, list(range(k)))
                    live.append(seq)
            elif not live:
                continue
            elif kind == "append" and appends:
                seq = live[int(pick * len(live))]
                tokens = list(range(k % 7))
                line = f"manager.append_tokens({seq!r}, {tokens})"
                before = list(m.block_table(seq))
                if not ours.can_append(seq, len(tokens)):
                    r.raises(OutOfBlocks, line, m.append_tokens, seq, tokens)
                    after = r.read(f"manager.block_table({seq!r})", m.block_table, seq)
                    n = r.read(f"manager.num_tokens({seq!r})", m.num_tokens, seq)
                    fail_unless(
                        r,
                        after == before and n == ours.num_tokens(seq),
                        "append not all or nothing",
                        f"a refused append changes nothing, but "
                        f"{seq!r} went from {len(before)} blocks and "
                        f"{ours.num_tokens(seq)} tokens to {len(after)} blocks and {n} "
                        "tokens: allocate (which may raise) before counting tokens or "
                        "extending the table",
                    )
                else:
                    new = run_with_tokens(r, line, "append_tokens", m.append_tokens, seq, tokens)
                    want = ours.append_tokens(seq, tokens)
                    expect_append(r, m, pool, seq, before, new, len(want), ours.num_tokens(seq))
            elif kind == "free":
                seq = live.pop(int(pick * len(live)))
                table = list(m.block_table(seq))
                pool.released.clear()
                r.run(f"manager.free_sequence({seq!r})", m.free_sequence, seq)
                ours.free_sequence(seq)
                fail_unless(
                    r,
                    pool.released == table[::-1],
                    "tail first",
                    f"free_sequence("
                    f"{seq!r}) should release {table[::-1]} (its table, last block first), "
                    f"it released {pool.released}",
                )
            else:
                continue
            fail_unless(
                r,
                pool.num_free == ours.pool.num_free,
                "num_free",
                f"after the last line "
                f"the pool should have {ours.pool.num_free} free blocks, it has "
                f"{pool.num_free}",
            )

    return run


def expect_append(
    r: Replay, m: Any, pool: BlockPool, seq: str, before: list[int], new: Any, want: int, n: int
) -> None:
    fail_unless(
        r,
        isinstance(new, list) and len(new) == want,
        "new blocks",
        f"the append should "
        f"add {want} block(s) ({n} tokens in blocks of {pool.block_size}; a new block only "
        f"when the last one is full) and return them, it returned {new!r}",
    )
    after = r.read(f"manager.block_table({seq!r})", m.block_table, seq)
    fail_unless(
        r,
        after == before + new,
        "table growth",
        f"the table should become the old one "
        f"{before} followed by the new blocks {new}; it is {after}",
    )
    tokens = r.read(f"manager.num_tokens({seq!r})", m.num_tokens, seq)
    fail_unless(r, tokens == n, "num_tokens", f"num_tokens({seq!r}) should be {n}, got {tokens}")
