"""The library's three block-table functions (`blocks_needed`, `slot_mapping`,
`grow_block_table`), checked on fixed cases and random ones (used by its tests)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from paged_kv.cache.block_pool import BlockPool
from paged_kv.cache.block_table import blocks_needed as reference_blocks_needed
from paged_kv.cache.block_table import slot_mapping as reference_slot_mapping
from paged_kv.course.checks import causes
from paged_kv.course.checks.failures import expect, expect_raises, passed
from paged_kv.errors import OutOfBlocks


def check_blocks_needed(fn: Callable[[int, int], int]) -> None:
    """`fn(num_tokens, block_size)` is the number of blocks that hold `num_tokens` tokens."""
    for tokens, size, want in [(0, 16, 0), (1, 16, 1), (16, 16, 1), (17, 16, 2), (33, 1, 33)]:
        got = fn(tokens, size)
        expect(
            got == want,
            f"blocks_needed({tokens}, {size}) should be {want}, got {got}.",
            causes.WRONG_RESULT,
        )
    rng = random.Random(0)
    for _ in range(1000):
        tokens, size = rng.randint(0, 10_000), rng.randint(1, 64)
        want = reference_blocks_needed(tokens, size)
        got = fn(tokens, size)
        expect(
            got == want,
            f"blocks_needed({tokens}, {size}) should be {want}, got {got}.",
            causes.WRONG_RESULT,
        )
    passed("blocks_needed")


def check_slot_mapping(fn: Callable[[Sequence[int], int, int, int], list[int]]) -> None:
    """`fn(block_table, block_size, start, end)` gives the slots of tokens start..end-1."""
    got = fn([7, 2], 4, 0, 6)
    expect(
        list(got) == [28, 29, 30, 31, 8, 9],
        "with block table [7, 2] and block_size 4, tokens 0..5 live in slots "
        f"[28, 29, 30, 31, 8, 9] (block 7 holds tokens 0-3, block 2 holds 4-5); got {list(got)}.",
        causes.WRONG_RESULT,
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
            causes.WRONG_RESULT,
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
        causes.WRONG_RESULT,
    )
    new = fn(pool, table, 5, 3)
    expect(
        new == [] and len(table) == 2,
        f"tokens 6-8 still fit in the second block; nothing should be allocated, got {new}.",
        causes.WRONG_RESULT,
    )
    new = fn(pool, table, 8, 1)
    expect(
        len(new) == 1 and len(table) == 3,
        f"token 9 starts a third block; table is {table}.",
        causes.WRONG_RESULT,
    )
    before = list(table)
    expect_raises(
        OutOfBlocks, lambda: fn(pool, table, 9, 8), "growing by 8 tokens with 1 free block"
    )
    expect(
        table == before and pool.num_free == 1,
        f"a failed grow must leave the table ({before}) and the pool (1 free) as they were; "
        f"now the table is {table} and {pool.num_free} free. Allocate first, then extend.",
        causes.WRONG_RESULT,
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
                causes.WRONG_RESULT,
            )
    passed("grow_block_table")
