"""Checks for the exercises: the library's own scenarios, run against the learner's code.

Each `check_*` runs fixed scenarios, then random operations compared with a reference, and
raises `CheckFailed` with a message that says what was expected and what happened.
The test suite runs the same checks on the library, so both meet one standard.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Sequence
from typing import Any

from paged_kv.block_pool import BlockPool
from paged_kv.block_table import blocks_needed as reference_blocks_needed
from paged_kv.block_table import slot_mapping as reference_slot_mapping
from paged_kv.errors import InvalidBlock, OutOfBlocks


class CheckFailed(AssertionError):
    """The learner's code did something the chapter's rules forbid; the message says what."""


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def _passed(what: str) -> None:
    print(f"✅ {what}: all checks passed")


def _expect_raises(error: type[Exception], action: Callable[[], Any], what: str) -> None:
    try:
        action()
    except error:
        return
    except NotImplementedError:
        raise
    except Exception as exc:  # the wrong error type is a learner mistake worth naming
        raise CheckFailed(f"{what} should raise {error.__name__}, but raised {exc!r}.") from exc
    raise CheckFailed(f"{what} should raise {error.__name__}, but returned normally.")


# -- chapter 01: the block pool ----------------------------------------------------------


def check_allocate(pool_cls: type, *, seed: int = 0) -> None:
    """`pool_cls(num_blocks, block_size)` hands out distinct ids, all or nothing."""
    pool = pool_cls(8, 16)
    _expect(
        pool.num_free == 8, f"a new pool of 8 blocks should have 8 free, it says {pool.num_free}."
    )
    ids = pool.allocate(3)
    _expect(len(ids) == 3, f"allocate(3) returned {len(ids)} ids: {ids}.")
    _expect(len(set(ids)) == 3, f"allocate(3) returned the same block twice: {ids}.")
    _expect(all(0 <= b < 8 for b in ids), f"allocate(3) returned ids outside 0..7: {ids}.")
    _expect(
        pool.num_free == 5, f"after allocate(3) of 8, num_free should be 5, not {pool.num_free}."
    )
    _expect(pool.allocate(0) == [], "allocate(0) should return [] and allocate nothing.")
    _expect_raises(OutOfBlocks, lambda: pool.allocate(6), "allocate(6) with 5 free blocks")
    _expect(
        pool.num_free == 5,
        f"a failed allocate(6) must change nothing, but num_free went from 5 to {pool.num_free} "
        "(check the free count before taking any block).",
    )
    rest = pool.allocate(5)
    _expect(
        sorted(ids + rest) == list(range(8)),
        f"allocating all 8 blocks gave {sorted(ids + rest)}: every id 0..7 exactly once.",
    )
    _expect_raises(OutOfBlocks, lambda: pool.allocate(1), "allocate(1) on a full pool")
    _random_differential(pool_cls, seed, use_release=False)
    _passed("allocate")


def check_release(pool_cls: type, *, seed: int = 0) -> None:
    """`release(ids)` frees blocks for reuse and refuses double frees and foreign ids."""
    pool = pool_cls(4, 16)
    a, b = pool.allocate(2)
    pool.release([a])
    _expect(
        pool.num_free == 3,
        f"after releasing 1 of 2 allocated blocks num_free should be 3, not {pool.num_free}.",
    )
    _expect_raises(InvalidBlock, lambda: pool.release([a]), f"releasing block {a} twice")
    _expect(pool.num_free == 3, "a refused double free must not change num_free.")
    _expect_raises(
        InvalidBlock, lambda: pool.release([b, b]), f"release([{b}, {b}]) (one reference)"
    )
    _expect(pool.num_free == 3, "a refused release must release nothing, not even the first id.")
    _expect_raises(InvalidBlock, lambda: pool.release([99]), "releasing block 99 of a 4-block pool")
    pool.release([b])
    _expect(
        sorted(pool.allocate(4)) == [0, 1, 2, 3],
        "after releasing everything, allocate(4) should hand out all four blocks again.",
    )
    _random_differential(pool_cls, seed, use_release=True)
    _passed("release")


def check_free_pages(pool_cls: type, *, seed: int = 0) -> None:
    """`free_pages()` lists the pages whose blocks are all free, in increasing order."""
    pool = pool_cls(8, 16, blocks_per_page=4)
    _expect(
        pool.free_pages() == [0, 1],
        f"a new pool of 2 pages should report [0, 1], got {pool.free_pages()}.",
    )
    rng = random.Random(seed)
    for trial in range(200):
        num_pages, per_page = rng.randint(1, 6), rng.randint(1, 5)
        pool = pool_cls(num_pages * per_page, 16, blocks_per_page=per_page)
        held = pool.allocate(rng.randint(0, num_pages * per_page))
        rng.shuffle(held)
        cut = rng.randint(0, len(held))
        pool.release(held[:cut])
        busy = sorted({b // per_page for b in held[cut:]})
        expected = [p for p in range(num_pages) if p not in busy]
        got = list(pool.free_pages())
        _expect(
            got == expected,
            f"trial {trial}: {num_pages} pages of {per_page} blocks, blocks in use on pages "
            f"{busy}: free_pages() should be {expected}, got {got}.",
        )
    _passed("free_pages")


def check_constant_time_allocate(pool_cls: type) -> None:
    """`allocate(1)` does the same amount of Python work in a pool of 10³ and of 10⁵ blocks.

    Counts executed Python lines (not seconds), so the verdict does not depend on the machine.
    """
    work = {}
    for size in (1_000, 100_000):
        pool = pool_cls(size, 16)
        pool.allocate(size // 2)  # a half-full pool: the free blocks are not at the front
        work[size] = count_lines_executed(lambda p=pool: [p.allocate(1) for _ in range(10)])
    _expect(
        work[100_000] <= 2 * work[1_000] + 20,
        f"allocate(1) ran {work[1_000]} Python lines in a 1,000-block pool but {work[100_000]} "
        "in a 100,000-block pool: it scans the pool. Keep the free ids in a structure you can "
        "pop from without searching (a list used as a stack, or a deque).",
    )
    _passed("constant-time allocate")


def count_lines_executed(fn: Callable[[], Any]) -> int:
    """How many Python source lines `fn()` executes (C built-ins count as one line)."""
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(previous)
    return count


def _random_differential(pool_cls: type, seed: int, *, use_release: bool) -> None:
    """Random allocate (and release) against BlockPool: same counts, same refusals."""
    rng = random.Random(seed)
    for _ in range(20):
        n = rng.randint(1, 40)
        theirs, ours = pool_cls(n, 16), BlockPool(n, 16)
        held: list[int] = []
        log: list[str] = []
        for _ in range(60):
            if use_release and held and rng.random() < 0.45:
                k = rng.randint(1, len(held))
                rng.shuffle(held)
                batch, held = held[:k], held[k:]
                log.append(f"release({batch})")
                theirs.release(batch)
                ours.release(rng.sample(_in_use(ours), k))
            else:
                k = rng.randint(0, max(1, n // 3))
                log.append(f"allocate({k})")
                if k > ours.num_free:
                    _expect_raises(
                        OutOfBlocks,
                        lambda t=theirs, k=k: t.allocate(k),
                        f"after {log[:-1][-6:]}, allocate({k}) with {ours.num_free} free",
                    )
                else:
                    got = theirs.allocate(k)
                    ours.allocate(k)
                    _expect(
                        len(got) == k and not set(got) & set(held) and all(0 <= b < n for b in got),
                        f"after {log[:-1][-6:]} on a {n}-block pool, allocate({k}) returned {got}, "
                        f"but blocks {sorted(held)} are still in use.",
                    )
                    held += got
            _expect(
                theirs.num_free == ours.num_free,
                f"after {log[-6:]} on a {n}-block pool, num_free should be {ours.num_free}, "
                f"got {theirs.num_free}.",
            )


def _in_use(pool: BlockPool) -> list[int]:
    return [b for b in range(pool.num_blocks) if pool.ref_count(b)]


# -- chapter 02: block tables --------------------------------------------------------------


def check_blocks_needed(fn: Callable[[int, int], int]) -> None:
    """`fn(num_tokens, block_size)` is the number of blocks that hold `num_tokens` tokens."""
    for tokens, size, want in [(0, 16, 0), (1, 16, 1), (16, 16, 1), (17, 16, 2), (33, 1, 33)]:
        got = fn(tokens, size)
        _expect(got == want, f"blocks_needed({tokens}, {size}) should be {want}, got {got}.")
    rng = random.Random(0)
    for _ in range(1000):
        tokens, size = rng.randint(0, 10_000), rng.randint(1, 64)
        want = reference_blocks_needed(tokens, size)
        got = fn(tokens, size)
        _expect(got == want, f"blocks_needed({tokens}, {size}) should be {want}, got {got}.")
    _passed("blocks_needed")


def check_slot_mapping(fn: Callable[[Sequence[int], int, int, int], list[int]]) -> None:
    """`fn(block_table, block_size, start, end)` gives the slots of tokens start..end-1."""
    got = fn([7, 2], 4, 0, 6)
    _expect(
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
        _expect(
            got == want,
            f"slot_mapping({table}, {size}, {start}, {end}) should be {want}, got {got}.",
        )
    _passed("slot_mapping")


def check_grow_block_table(fn: Callable[[BlockPool, list[int], int, int], list[int]]) -> None:
    """`fn(pool, table, num_tokens, num_new)` adds blocks only when needed, all or nothing."""
    pool = BlockPool(4, 4)
    table: list[int] = []
    new = fn(pool, table, 0, 5)
    _expect(
        len(table) == 2 and new == table,
        f"5 tokens in blocks of 4 need 2 blocks; table is {table}, returned {new}.",
    )
    new = fn(pool, table, 5, 3)
    _expect(
        new == [] and len(table) == 2,
        f"tokens 6-8 still fit in the second block; nothing should be allocated, got {new}.",
    )
    new = fn(pool, table, 8, 1)
    _expect(len(new) == 1 and len(table) == 3, f"token 9 starts a third block; table is {table}.")
    before = list(table)
    _expect_raises(
        OutOfBlocks, lambda: fn(pool, table, 9, 8), "growing by 8 tokens with 1 free block"
    )
    _expect(
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
                _expect_raises(
                    OutOfBlocks,
                    lambda t=table, n=tokens, e=extra, p=pool: fn(p, t, n, e),
                    f"growing a {tokens}-token table by {extra} with {pool.num_free} free",
                )
                continue
            fn(pool, table, tokens, extra)
            tokens += extra
            _expect(
                len(table) == reference_blocks_needed(tokens, size),
                f"{tokens} tokens with block_size {size} need "
                f"{reference_blocks_needed(tokens, size)} blocks; the table has {len(table)}.",
            )
    _passed("grow_block_table")
