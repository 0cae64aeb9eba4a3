"""Chapter 02 checks: a manager keeps one block table per sequence over a pool, grows it only
when the last block is full, frees it tail first, and every call is all or nothing.

The manager under test is `manager_cls(pool)` with `add_sequence(seq_id, token_ids)`,
`append_tokens(seq_id, token_ids)`, `free_sequence(seq_id)`, `block_table(seq_id)`,
`num_tokens(seq_id)` and `slot_mapping(seq_id, start=0, end=None)`. The checks hand it a
`BlockPool` that records which blocks are allocated and released, in which order. The three
block-table functions of the library are checked by `check_blocks_needed`,
`check_slot_mapping` and `check_grow_block_table`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from paged_kv.cache.block_pool import BlockPool
from paged_kv.cache.block_table import blocks_needed as reference_blocks_needed
from paged_kv.cache.block_table import slot_mapping as reference_slot_mapping
from paged_kv.course.checks.support import (
    Replay,
    exercise,
    expect,
    expect_raises,
    fixed,
    passed,
    search,
)
from paged_kv.errors import DuplicateSequence, InvalidArgument, OutOfBlocks, UnknownSequence


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


def _name(cls: Any) -> str:
    return getattr(getattr(cls, "func", cls), "__name__", "Manager")


# -- exercise 1: add and free ----------------------------------------------------------------


@exercise(1, "add_sequence and free_sequence")
def check_add_and_free(manager_cls: Callable[[Any], Any], *, seed: int = 0) -> None:
    """A new sequence gets exactly the blocks its prompt needs, or nothing; freeing it gives
    them back, last block first."""
    name = _name(manager_cls)

    def scenario(r: Replay) -> None:
        pool = RecordingPool(6, 4)
        r.note("pool = BlockPool(6, 4)  # 6 blocks of 4 tokens")
        m = r.run(f"manager = {name}(pool)", manager_cls, pool)
        table = r.run(
            "manager.add_sequence('a', [11, 12, 13, 14, 15, 16])",
            m.add_sequence,
            "a",
            [11, 12, 13, 14, 15, 16],
        )
        _table_ok(r, m, pool, "a", table, 6, set())
        _expect(
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
            _expect(
                r,
                99 not in got,
                "copy",
                "block_table / add_sequence must return a copy: "
                "appending to the returned list changed the manager's table",
            )
        b = r.run("manager.add_sequence('b', list(range(8)))", m.add_sequence, "b", list(range(8)))
        _table_ok(r, m, pool, "b", b, 8, set(m.block_table("a")))
        free_before = pool.num_free
        r.raises(DuplicateSequence, "manager.add_sequence('a', [1])", m.add_sequence, "a", [1])
        _unchanged(
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
        _unchanged(r, pool, free_before, "a refused add changes nothing")
        r.raises(UnknownSequence, "manager.block_table('c')", m.block_table, "c")
        if (err.requested, err.available) != (3, 2):
            r.fail(
                "OutOfBlocks fields",
                f"OutOfBlocks should say requested=3, available=2 "
                f"(9 tokens need 3 blocks, 2 are free), it says requested={err.requested}, "
                f"available={err.available}",
            )
        a_table = m.block_table("a")
        pool.released.clear()
        r.run("manager.free_sequence('a')", m.free_sequence, "a")
        _expect(
            r,
            sorted(pool.released) == sorted(a_table),
            "free releases",
            "free_sequence "
            f"should release the sequence's blocks {a_table}, it released {pool.released}",
        )
        _expect(
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
        _table_ok(r, m, pool, "c", c, 9, set(m.block_table("b")))

    fixed("Every step of the check", scenario, Replay())
    search(
        _run_manager(manager_cls, appends=False),
        _manager_ops,
        trials=60,
        seed=seed,
        what="check_add_and_free",
    )
    passed("tables sized, refusals change nothing, tails freed first")


def _expect(r: Replay, ok: bool, cause: str, message: str) -> None:
    if not ok:
        r.fail(cause, message)


def _unchanged(r: Replay, pool: BlockPool, free_before: int, why: str) -> None:
    _expect(
        r,
        pool.num_free == free_before,
        f"changed: {why}",
        f"{why}; the pool had "
        f"{free_before} free blocks before that line and has {pool.num_free} now",
    )


def _table_ok(
    r: Replay, m: Any, pool: BlockPool, seq: str, table: Any, n: int, others: set[int]
) -> None:
    want = reference_blocks_needed(n, pool.block_size)
    _expect(
        r,
        isinstance(table, list),
        "table type",
        f"add_sequence should return the block table (a list of block ids), got {table!r}",
    )
    _expect(
        r,
        len(table) == want,
        "table length",
        f"{n} tokens in blocks of {pool.block_size} need {want} blocks; the table is {table}",
    )
    _expect(
        r,
        len(set(table)) == len(table) and not set(table) & others,
        "table ids",
        f"the table {table} must hold distinct blocks that no other sequence holds "
        f"({sorted(others)})",
    )
    in_use = [b for b in table if pool.ref_count(b) == 0]
    _expect(
        r,
        not in_use,
        "table not allocated",
        f"blocks {in_use} of the table were never allocated from the pool",
    )
    got = r.read(f"manager.block_table({seq!r})", m.block_table, seq)
    _expect(
        r,
        list(got) == table,
        "block_table",
        f"block_table({seq!r}) is {got}, but add_sequence returned {table}",
    )
    tokens = r.read(f"manager.num_tokens({seq!r})", m.num_tokens, seq)
    _expect(r, tokens == n, "num_tokens", f"num_tokens({seq!r}) should be {n}, got {tokens}")


def _manager_ops(rng: random.Random) -> list[Any]:
    """A pool (blocks, block size), then intents: ("add", length), ("append", k, pick),
    ("free", pick)."""
    ops: list[Any] = [(rng.randint(1, 16), rng.randint(1, 5))]
    for _ in range(40):
        kind = rng.choice(["add", "add", "append", "append", "append", "free"])
        ops.append((kind, rng.randint(1, 14), rng.random()))
    return ops


def _run_manager(manager_cls: Callable[[Any], Any], *, appends: bool) -> Any:
    """Apply the intents to the learner's manager (on a RecordingPool) and to the library's
    KVCacheManager; compare what fits, tables' lengths, token counts and free blocks."""
    from paged_kv.cache.manager import KVCacheManager

    def run(ops: list[Any], r: Replay) -> None:
        num_blocks, size = ops[0]
        pool = RecordingPool(num_blocks, size)
        r.note(f"pool = BlockPool({num_blocks}, {size})")
        m = r.run(f"manager = {_name(manager_cls)}(pool)", manager_cls, pool)
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
                    r.raises(UnknownSequence, f"manager.num_tokens({seq!r})", m.num_tokens, seq)
                    want = (reference_blocks_needed(k, size), ours.pool.num_free)
                    _expect(
                        r,
                        (err.requested, err.available) == want,
                        "OutOfBlocks fields",
                        f"OutOfBlocks should say requested={want[0]}, available={want[1]}"
                        f"; yours says requested={err.requested}, available="
                        f"{err.available}",
                    )
                else:
                    table = r.run(line, m.add_sequence, seq, list(range(k)))
                    others = {b for s in live for b in m.block_table(s)}
                    _table_ok(r, m, pool, seq, table, k, others)
                    ours.add_sequence(seq, list(range(k)))
                    live.append(seq)
            elif not live:
                continue
            elif kind == "append" and appends:
                seq = live[int(pick * len(live))]
                tokens = list(range(k % 7))
                line = f"manager.append_tokens({seq!r}, {tokens})"
                before = m.block_table(seq)
                if not ours.can_append(seq, len(tokens)):
                    r.raises(OutOfBlocks, line, m.append_tokens, seq, tokens)
                    after = r.read(f"manager.block_table({seq!r})", m.block_table, seq)
                    n = r.read(f"manager.num_tokens({seq!r})", m.num_tokens, seq)
                    _expect(
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
                    new = r.run(line, m.append_tokens, seq, tokens)
                    want = ours.append_tokens(seq, tokens)
                    _check_append(r, m, pool, seq, before, new, len(want), ours.num_tokens(seq))
            elif kind == "free":
                seq = live.pop(int(pick * len(live)))
                table = m.block_table(seq)
                pool.released.clear()
                r.run(f"manager.free_sequence({seq!r})", m.free_sequence, seq)
                ours.free_sequence(seq)
                _expect(
                    r,
                    pool.released == table[::-1],
                    "tail first",
                    f"free_sequence("
                    f"{seq!r}) should release {table[::-1]} (its table, last block first), "
                    f"it released {pool.released}",
                )
            else:
                continue
            _expect(
                r,
                pool.num_free == ours.pool.num_free,
                "num_free",
                f"after the last line "
                f"the pool should have {ours.pool.num_free} free blocks, it has "
                f"{pool.num_free}",
            )

    return run


def _check_append(
    r: Replay, m: Any, pool: BlockPool, seq: str, before: list[int], new: Any, want: int, n: int
) -> None:
    _expect(
        r,
        isinstance(new, list) and len(new) == want,
        "new blocks",
        f"the append should "
        f"add {want} block(s) ({n} tokens in blocks of {pool.block_size}; a new block only "
        f"when the last one is full) and return them, it returned {new!r}",
    )
    after = r.read(f"manager.block_table({seq!r})", m.block_table, seq)
    _expect(
        r,
        after == before + new,
        "table growth",
        f"the table should become the old one "
        f"{before} followed by the new blocks {new}; it is {after}",
    )
    tokens = r.read(f"manager.num_tokens({seq!r})", m.num_tokens, seq)
    _expect(r, tokens == n, "num_tokens", f"num_tokens({seq!r}) should be {n}, got {tokens}")


# -- exercise 2: append ----------------------------------------------------------------------


@exercise(2, "append_tokens")
def check_append(manager_cls: Callable[[Any], Any], *, seed: int = 0) -> None:
    """Appending allocates a block only when the last one is full, all or nothing."""
    name = _name(manager_cls)

    def scenario(r: Replay) -> None:
        pool = RecordingPool(5, 4)
        r.note("pool = BlockPool(5, 4)")
        m = r.run(f"manager = {name}(pool)", manager_cls, pool)
        before = r.run(
            "manager.add_sequence('a', [1, 2, 3, 4, 5, 6])", m.add_sequence, "a", [1, 2, 3, 4, 5, 6]
        )
        for tokens, want, n in [
            ([7], 0, 7),
            ([8], 0, 8),
            ([9], 1, 9),
            ([], 0, 9),
            ([10, 11, 12, 13, 14, 15, 16, 17], 2, 17),
        ]:
            before = r.read("manager.block_table('a')", m.block_table, "a")
            new = r.run(f"manager.append_tokens('a', {tokens})", m.append_tokens, "a", tokens)
            _check_append(r, m, pool, "a", before, new, want, n)
        before = m.block_table("a")
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
        _expect(
            r,
            (after, n, pool.num_free) == (before, 17, free),
            "append not all or nothing",
            f"a refused append changes nothing: expected table {before}, 17 tokens and "
            f"{free} free blocks, got {after}, {n} and {pool.num_free}; allocate (which may "
            "raise) before counting the tokens or extending the table",
        )
        _expect(
            r,
            (err.requested, err.available) == (2, 0),
            "OutOfBlocks fields",
            "the "
            f"append needs 2 blocks and none is free, so OutOfBlocks(requested=2, "
            f"available=0); got requested={err.requested}, available={err.available}",
        )
        r.raises(UnknownSequence, "manager.append_tokens('zz', [1])", m.append_tokens, "zz", [1])

    fixed("Every step of the check", scenario, Replay())
    search(
        _run_manager(manager_cls, appends=True),
        _manager_ops,
        trials=80,
        seed=seed,
        what="check_append",
    )
    passed("a block only when the last is full, all or nothing")


# -- exercise 3: slot mapping ----------------------------------------------------------------


@exercise(3, "slot_mapping")
def check_manager_slots(manager_cls: Callable[[Any], Any], *, seed: int = 0) -> None:
    """`slot_mapping(seq_id, start=0, end=None)` gives the slot of each token start..end-1
    through the sequence's own table; `end` defaults to its length; bad ranges are refused."""
    name = _name(manager_cls)
    rng = random.Random(seed)
    for trial in range(40):
        size = rng.randint(1, 5)
        num_blocks = rng.randint(4, 12)
        r = Replay(f"pool = BlockPool({num_blocks}, {size})")

        def scenario(r: Replay, size: int = size, num_blocks: int = num_blocks) -> None:
            pool = BlockPool(num_blocks, size)
            m = r.run(f"manager = {name}(pool)", manager_cls, pool)
            r.run("manager.add_sequence('other', [0])", m.add_sequence, "other", [0])
            n = rng.randint(1, (num_blocks - 1) * size)
            r.run(
                f"manager.add_sequence('a', list(range({n})))", m.add_sequence, "a", list(range(n))
            )
            r.run("manager.free_sequence('other')", m.free_sequence, "other")
            table = r.read("manager.block_table('a')", m.block_table, "a")
            want = reference_slot_mapping(table, size, 0, n)
            got = r.read("manager.slot_mapping('a')", m.slot_mapping, "a")
            _slots(r, "manager.slot_mapping('a')", got, want, table, size, (0, n, n))
            start = rng.randint(0, n)
            end = rng.randint(start, n)
            got = r.read(
                f"manager.slot_mapping('a', {start}, {end})", m.slot_mapping, "a", start, end
            )
            line = f"manager.slot_mapping('a', {start}, {end})"
            _slots(r, line, got, want[start:end], table, size, (start, end, n))
            for bad in [(0, n + 1), (-1, n), (min(n, 2), min(n, 2) - 1)]:
                r.raises(
                    InvalidArgument,
                    f"manager.slot_mapping('a', {bad[0]}, {bad[1]})",
                    m.slot_mapping,
                    "a",
                    *bad,
                )
            r.raises(UnknownSequence, "manager.slot_mapping('zz')", m.slot_mapping, "zz")

        fixed(f"Every step of the check (trial {trial}, seed={seed})", scenario, r)
    passed("slots through the table, bad ranges refused")


def _slots(
    r: Replay, line: str, got: Any, want: list[int], table: list[int], size: int, span: tuple
) -> None:
    got = list(got) if isinstance(got, list | tuple | range) else got
    if got == want:
        return
    start, end, _ = span

    def slots(a: int, b: int) -> list[int]:
        return [table[t // size] * size + t % size for t in range(a, min(b, len(table) * size))]

    hint = "token t is at offset t % block_size of physical block table[t // block_size]"
    if got == slots(start, len(table) * size) and "," not in line:  # the default end
        hint = "by default `end` is the sequence's length, not the table's capacity"
    elif got == slots(start, end + 1):
        hint = "`end` is exclusive: tokens start..end-1"
    r.fail(
        f"slots: {hint}",
        f"with table {table} and block_size {size}, `{line}` should be {want}, got {got!r} "
        f"({hint})",
    )


# -- your parts so far -----------------------------------------------------------------------


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
        m = r.run(f"manager = {_name(manager_cls)}(pool)", manager_cls, pool)
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
                slots = r.read(f"manager.slot_mapping({seq!r})", m.slot_mapping, seq)
                _expect(
                    r,
                    len(slots) == ours.num_tokens(seq),
                    "slot count",
                    f"{seq!r} has {ours.num_tokens(seq)} tokens but {len(slots)} slots",
                )
                for slot in slots:
                    _expect(
                        r,
                        slot not in seen,
                        "shared slot",
                        f"slot {slot} belongs to both "
                        f"{seen.get(slot)!r} and {seq!r}: their K/V would overwrite each "
                        "other",
                    )
                    seen[slot] = seq
            free = r.read("pool.num_free", lambda: pool.num_free)
            _expect(
                r,
                free == ours.pool.num_free,
                "num_free",
                f"the pool should have {ours.pool.num_free} free blocks, it has {free}",
            )

    fixed("Every step of the check", scenario, Replay())
    passed(f"your manager on {pool_name}: {len(ops)} operations, no slot shared")


# -- the library's block-table functions (used by its tests) ---------------------------------


def check_blocks_needed(fn: Callable[[int, int], int]) -> None:
    """`fn(num_tokens, block_size)` is the number of blocks that hold `num_tokens` tokens."""
    for tokens, size, want in [(0, 16, 0), (1, 16, 1), (16, 16, 1), (17, 16, 2), (33, 1, 33)]:
        got = fn(tokens, size)
        expect(got == want, f"blocks_needed({tokens}, {size}) should be {want}, got {got}.")
    rng = random.Random(0)
    for _ in range(1000):
        tokens, size = rng.randint(0, 10_000), rng.randint(1, 64)
        want = reference_blocks_needed(tokens, size)
        got = fn(tokens, size)
        expect(got == want, f"blocks_needed({tokens}, {size}) should be {want}, got {got}.")
    passed("blocks_needed")


def check_slot_mapping(fn: Callable[[Sequence[int], int, int, int], list[int]]) -> None:
    """`fn(block_table, block_size, start, end)` gives the slots of tokens start..end-1."""
    got = fn([7, 2], 4, 0, 6)
    expect(
        list(got) == [28, 29, 30, 31, 8, 9],
        "with block table [7, 2] and block_size 4, tokens 0..5 live in slots "
        f"[28, 29, 30, 31, 8, 9] (block 7 holds tokens 0-3, block 2 holds 4-5); got {list(got)}.",
    )
    rng = random.Random(0)
    for _ in range(500):
        size = rng.randint(1, 16)
        table = rng.sample(range(64), rng.randint(1, 8))
        start = rng.randint(0, len(table) * size)
        end = rng.randint(start, len(table) * size)
        want = reference_slot_mapping(table, size, start, end)
        got = list(fn(table, size, start, end))
        expect(
            got == want,
            f"slot_mapping({table}, {size}, {start}, {end}) should be {want}, got {got}.",
        )
    passed("slot_mapping")


def check_grow_block_table(fn: Callable[[BlockPool, list[int], int, int], list[int]]) -> None:
    """`fn(pool, table, num_tokens, num_new)` adds blocks only when needed, all or nothing."""
    pool = BlockPool(4, 4)
    table: list[int] = []
    new = fn(pool, table, 0, 5)
    expect(
        len(table) == 2 and new == table,
        f"5 tokens in blocks of 4 need 2 blocks; table is {table}, returned {new}.",
    )
    new = fn(pool, table, 5, 3)
    expect(
        new == [] and len(table) == 2,
        f"tokens 6-8 still fit in the second block; nothing should be allocated, got {new}.",
    )
    new = fn(pool, table, 8, 1)
    expect(len(new) == 1 and len(table) == 3, f"token 9 starts a third block; table is {table}.")
    before = list(table)
    expect_raises(
        OutOfBlocks, lambda: fn(pool, table, 9, 8), "growing by 8 tokens with 1 free block"
    )
    expect(
        table == before and pool.num_free == 1,
        f"a failed grow must leave the table ({before}) and the pool (1 free) as they were; "
        f"now the table is {table} and {pool.num_free} free. Allocate first, then extend.",
    )
    rng = random.Random(0)
    for _ in range(100):
        size = rng.randint(1, 8)
        pool = BlockPool(rng.randint(1, 12), size)
        table, tokens = [], 0
        for _ in range(20):
            extra = rng.randint(0, 2 * size)
            fits = reference_blocks_needed(tokens + extra, size) - len(table) <= pool.num_free
            if not fits:
                expect_raises(
                    OutOfBlocks,
                    lambda t=table, n=tokens, e=extra, p=pool: fn(p, t, n, e),
                    f"growing a {tokens}-token table by {extra} with {pool.num_free} free",
                )
                continue
            fn(pool, table, tokens, extra)
            tokens += extra
            expect(
                len(table) == reference_blocks_needed(tokens, size),
                f"{tokens} tokens with block_size {size} need "
                f"{reference_blocks_needed(tokens, size)} blocks; the table has {len(table)}.",
            )
    passed("grow_block_table")
