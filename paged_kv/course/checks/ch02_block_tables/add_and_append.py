"""Exercises 1 and 2 of chapter 02: `add_sequence` and `free_sequence` size a table and free
it tail first; `append_tokens` takes a block only when the last one is full; every refusal
changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from paged_kv.course.checks.ch02_block_tables.manager_trials import (
    RecordingPool,
    expect_append,
    expect_copy,
    expect_not_recorded,
    expect_table,
    expect_unchanged,
    fail_unless,
    manager_name,
    manager_ops,
    run_manager,
    run_with_tokens,
)
from paged_kv.course.checks.failures import exercise, passed
from paged_kv.course.checks.replay import Replay, fixed, search
from paged_kv.errors import DuplicateSequence, InvalidArgument, OutOfBlocks, UnknownSequence


@exercise(1, "add_sequence and free_sequence")
def check_add_and_free(manager_cls: Callable[[Any], Any], *, seed: int = 0) -> None:
    """A new sequence gets exactly the blocks its prompt needs, or nothing; freeing it gives
    them back, last block first."""
    name = manager_name(manager_cls)

    def scenario(r: Replay) -> None:
        pool = RecordingPool(6, 4)
        r.note("pool = BlockPool(6, 4)  # 6 blocks of 4 tokens")
        m = r.run(f"manager = {name}(pool)", manager_cls, pool)
        table = run_with_tokens(
            r,
            "manager.add_sequence('a', [11, 12, 13, 14, 15, 16])",
            "add_sequence",
            m.add_sequence,
            "a",
            [11, 12, 13, 14, 15, 16],
        )
        expect_table(r, m, pool, "a", table, 6, set())
        fail_unless(
            r,
            pool.num_free == 4,
            "blocks",
            f"6 tokens in blocks of 4 take 2 blocks; the "
            f"pool has {pool.num_free} free of 6, expected 4",
        )
        if isinstance(table, list) and table:
            table.append(99)  # the caller's copy: the manager's table must not change
            r.note("table = _; table.append(99)  # your table must not change")
            got = r.read("manager.block_table('a')", m.block_table, "a")
            fail_unless(
                r,
                99 not in got,
                "copy",
                "add_sequence must return a copy: the caller changed your table (appending "
                "99 to the list it returned changed the manager's table); return list(table)",
            )
        expect_copy(r, m, "a")
        b = r.run("manager.add_sequence('b', list(range(8)))", m.add_sequence, "b", list(range(8)))
        expect_table(r, m, pool, "b", b, 8, set(m.block_table("a")))
        free_before = pool.num_free
        r.raises(DuplicateSequence, "manager.add_sequence('a', [1])", m.add_sequence, "a", [1])
        expect_unchanged(
            r,
            pool,
            free_before,
            "a refused add (duplicate id) allocates nothing: check the id before taking blocks",
        )
        r.raises(InvalidArgument, "manager.add_sequence('e', [])", m.add_sequence, "e", [])
        err = r.raises(
            OutOfBlocks,
            "manager.add_sequence('c', list(range(9)))",
            m.add_sequence,
            "c",
            list(range(9)),
        )
        expect_unchanged(r, pool, free_before, "a refused add changes nothing")
        expect_not_recorded(r, "manager.block_table('c')", m.block_table, "c")
        if (err.requested, err.available) != (3, 2):
            r.fail(
                "OutOfBlocks fields",
                f"OutOfBlocks should say requested=3, available=2 "
                f"(9 tokens need 3 blocks, 2 are free), it says requested={err.requested}, "
                f"available={err.available}",
            )
        a_table = list(m.block_table("a"))
        pool.released.clear()
        r.run("manager.free_sequence('a')", m.free_sequence, "a")
        fail_unless(
            r,
            sorted(pool.released) == sorted(a_table),
            "free releases",
            "free_sequence "
            f"should release the sequence's blocks {a_table}, it released {pool.released}",
        )
        fail_unless(
            r,
            pool.released == a_table[::-1],
            "tail first",
            "free_sequence releases the "
            f"last block first ({a_table[::-1]}), so the tail is reused first once "
            f"blocks are cached (chapter 03); it released {pool.released}",
        )
        r.raises(UnknownSequence, "manager.free_sequence('a')", m.free_sequence, "a")
        r.raises(UnknownSequence, "manager.num_tokens('a')", m.num_tokens, "a")
        c = r.run("manager.add_sequence('c', list(range(9)))", m.add_sequence, "c", list(range(9)))
        expect_table(r, m, pool, "c", c, 9, set(m.block_table("b")))

    fixed("Every step of the check", scenario, Replay())
    search(
        run_manager(manager_cls, appends=False),
        manager_ops,
        trials=60,
        seed=seed,
        what="check_add_and_free",
    )
    passed("tables sized, refusals change nothing, tails freed first")


@exercise(2, "append_tokens")
def check_append(manager_cls: Callable[[Any], Any], *, seed: int = 0) -> None:
    """Appending allocates a block only when the last one is full, all or nothing."""
    name = manager_name(manager_cls)

    def scenario(r: Replay) -> None:
        pool = RecordingPool(5, 4)
        r.note("pool = BlockPool(5, 4)")
        m = r.run(f"manager = {name}(pool)", manager_cls, pool)
        r.run(
            "manager.add_sequence('a', [1, 2, 3, 4, 5, 6])", m.add_sequence, "a", [1, 2, 3, 4, 5, 6]
        )
        expect_copy(r, m, "a")
        for tokens, want, n in [
            ([7], 0, 7),
            ([8], 0, 8),
            ([9], 1, 9),
            ([], 0, 9),
            ([10, 11, 12, 13, 14, 15, 16, 17], 2, 17),
        ]:
            before = list(r.read("manager.block_table('a')", m.block_table, "a"))
            line = f"manager.append_tokens('a', {tokens})"
            new = run_with_tokens(r, line, "append_tokens", m.append_tokens, "a", tokens)
            expect_append(r, m, pool, "a", before, new, want, n)
        before = list(m.block_table("a"))
        free = pool.num_free
        err = r.raises(
            OutOfBlocks,
            "manager.append_tokens('a', list(range(8)))",
            m.append_tokens,
            "a",
            list(range(8)),
        )
        after = r.read("manager.block_table('a')", m.block_table, "a")
        n = r.read("manager.num_tokens('a')", m.num_tokens, "a")
        fail_unless(
            r,
            (after, n, pool.num_free) == (before, 17, free),
            "append not all or nothing",
            f"a refused append changes nothing: expected table {before}, 17 tokens and "
            f"{free} free blocks, got {after}, {n} and {pool.num_free}; allocate (which may "
            "raise) before counting the tokens or extending the table",
        )
        fail_unless(
            r,
            (err.requested, err.available) == (2, 0),
            "OutOfBlocks fields",
            "the "
            f"append needs 2 blocks and none is free, so OutOfBlocks(requested=2, "
            f"available=0); got requested={err.requested}, available={err.available}",
        )
        r.raises(UnknownSequence, "manager.append_tokens('zz', [1])", m.append_tokens, "zz", [1])
        r.raises(
            UnknownSequence,
            "manager.append_tokens('zz', [])",
            m.append_tokens,
            "zz",
            [],
            why="an unknown id is refused even with nothing to append: check the id first",
        )

    fixed("Every step of the check", scenario, Replay())
    search(
        run_manager(manager_cls, appends=True),
        manager_ops,
        trials=80,
        seed=seed,
        what="check_append",
    )
    passed("a block only when the last is full, all or nothing")
