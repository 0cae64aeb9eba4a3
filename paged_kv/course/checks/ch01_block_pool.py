"""Chapter 01 checks: a block pool allocates, releases and frees pages like `BlockPool`,
in constant work per block."""

from __future__ import annotations

import random

from paged_kv.cache.block_pool import BlockPool
from paged_kv.course.checks.support import (
    count_lines_executed,
    expect,
    expect_raises,
    passed,
)
from paged_kv.errors import InvalidBlock, OutOfBlocks


def check_allocate(pool_cls: type, *, seed: int = 0) -> None:
    """`pool_cls(num_blocks, block_size)` hands out distinct ids, all or nothing."""
    pool = pool_cls(8, 16)
    expect(
        pool.num_free == 8, f"a new pool of 8 blocks should have 8 free, it says {pool.num_free}."
    )
    ids = pool.allocate(3)
    expect(len(ids) == 3, f"allocate(3) returned {len(ids)} ids: {ids}.")
    expect(len(set(ids)) == 3, f"allocate(3) returned the same block twice: {ids}.")
    expect(all(0 <= b < 8 for b in ids), f"allocate(3) returned ids outside 0..7: {ids}.")
    expect(
        pool.num_free == 5, f"after allocate(3) of 8, num_free should be 5, not {pool.num_free}."
    )
    expect(pool.allocate(0) == [], "allocate(0) should return [] and allocate nothing.")
    expect_raises(OutOfBlocks, lambda: pool.allocate(6), "allocate(6) with 5 free blocks")
    expect(
        pool.num_free == 5,
        f"a failed allocate(6) must change nothing, but num_free went from 5 to {pool.num_free} "
        "(check the free count before taking any block).",
    )
    rest = pool.allocate(5)
    expect(
        sorted(ids + rest) == list(range(8)),
        f"allocating all 8 blocks gave {sorted(ids + rest)}: every id 0..7 exactly once.",
    )
    expect_raises(OutOfBlocks, lambda: pool.allocate(1), "allocate(1) on a full pool")
    _random_differential(pool_cls, seed, use_release=False)
    passed("allocate")


def check_release(pool_cls: type, *, seed: int = 0) -> None:
    """`release(ids)` frees blocks for reuse and refuses double frees and foreign ids."""
    pool = pool_cls(4, 16)
    a, b = pool.allocate(2)
    pool.release([a])
    expect(
        pool.num_free == 3,
        f"after releasing 1 of 2 allocated blocks num_free should be 3, not {pool.num_free}.",
    )
    expect_raises(InvalidBlock, lambda: pool.release([a]), f"releasing block {a} twice")
    expect(pool.num_free == 3, "a refused double free must not change num_free.")
    expect_raises(
        InvalidBlock, lambda: pool.release([b, b]), f"release([{b}, {b}]) (one reference)"
    )
    expect(pool.num_free == 3, "a refused release must release nothing, not even the first id.")
    expect_raises(InvalidBlock, lambda: pool.release([99]), "releasing block 99 of a 4-block pool")
    pool.release([b])
    expect(
        sorted(pool.allocate(4)) == [0, 1, 2, 3],
        "after releasing everything, allocate(4) should hand out all four blocks again.",
    )
    _random_differential(pool_cls, seed, use_release=True)
    passed("release")


def check_free_pages(pool_cls: type, *, seed: int = 0) -> None:
    """`free_pages()` lists the pages whose blocks are all free, in increasing order."""
    pool = pool_cls(8, 16, blocks_per_page=4)
    expect(
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
        expect(
            got == expected,
            f"trial {trial}: {num_pages} pages of {per_page} blocks, blocks in use on pages "
            f"{busy}: free_pages() should be {expected}, got {got}.",
        )
    passed("free_pages")


def check_constant_time_allocate(pool_cls: type) -> None:
    """`allocate(1)` does the same amount of Python work in a pool of 10³ and of 10⁵ blocks.

    Counts executed Python lines (not seconds), so the verdict does not depend on the machine.
    """
    work = {}
    for size in (1_000, 100_000):
        pool = pool_cls(size, 16)
        pool.allocate(size // 2)  # a half-full pool: the free blocks are not at the front
        work[size] = count_lines_executed(lambda p=pool: [p.allocate(1) for _ in range(10)])
    expect(
        work[100_000] <= 2 * work[1_000] + 20,
        f"allocate(1) ran {work[1_000]} Python lines in a 1,000-block pool but {work[100_000]} "
        "in a 100,000-block pool: it scans the pool. Keep the free ids in a structure you can "
        "pop from without searching (a list used as a stack, or a deque).",
    )
    passed("constant-time allocate")


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
                    expect_raises(
                        OutOfBlocks,
                        lambda t=theirs, k=k: t.allocate(k),
                        f"after {log[:-1][-6:]}, allocate({k}) with {ours.num_free} free",
                    )
                else:
                    got = theirs.allocate(k)
                    ours.allocate(k)
                    expect(
                        len(got) == k and not set(got) & set(held) and all(0 <= b < n for b in got),
                        f"after {log[:-1][-6:]} on a {n}-block pool, allocate({k}) returned {got}, "
                        f"but blocks {sorted(held)} are still in use.",
                    )
                    held += got
            expect(
                theirs.num_free == ours.num_free,
                f"after {log[-6:]} on a {n}-block pool, num_free should be {ours.num_free}, "
                f"got {theirs.num_free}.",
            )


def _in_use(pool: BlockPool) -> list[int]:
    return [b for b in range(pool.num_blocks) if pool.ref_count(b)]
