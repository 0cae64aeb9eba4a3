"""Exercise 3 of chapter 01: `free_pages()` lists the pages whose blocks are all free."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from paged_kv.course.checks.ch01_block_pool.pool_trials import expect_read, pool_name, run_batch
from paged_kv.course.checks.cost import Meter, count_lines_executed, describe_touches, instrument
from paged_kv.course.checks.failures import CheckFailed, call, exercise, passed
from paged_kv.course.checks.replay import Replay, fixed, search
from paged_kv.errors import InvalidArgument


@exercise(3, "free_pages")
def check_free_pages(pool_cls: type, *, seed: int = 0) -> None:
    """`free_pages()` lists the pages whose blocks are all free, in increasing order."""
    name = pool_name(pool_cls)

    def scenario(r: Replay) -> None:
        pool = r.run(f"pool = {name}(8, 16, blocks_per_page=4)", pool_cls, 8, 16, blocks_per_page=4)
        expect_read(r, "pool.free_pages()", pool.free_pages, [0, 1], "two pages, all blocks free")
        a = r.run("a = pool.allocate(1)", pool.allocate, 1)
        page = a[0] // 4
        expect_read(
            r,
            "pool.free_pages()",
            pool.free_pages,
            [1 - page],
            f"block {a[0]} is in use, so its page {page} is not free",
        )
        run_batch(r, f"pool.share({a})", pool.share, a)
        run_batch(r, f"pool.release({a})", pool.release, a)
        expect_read(
            r,
            "pool.free_pages()",
            pool.free_pages,
            [1 - page],
            f"block {a[0]} still has a reference",
        )
        run_batch(r, f"pool.release({a})", pool.release, a)
        expect_read(r, "pool.free_pages()", pool.free_pages, [0, 1], "every block is free again")
        try:
            plain = pool_cls(8, 16)
        except InvalidArgument:
            return  # this pool needs pages (BlockPool with allocation="pack_pages")
        r.note(f"plain = {name}(8, 16)")
        expect_read(r, "plain.free_pages()", plain.free_pages, [], "a pool without pages has none")

    fixed("Every step of the check", scenario, Replay())
    _partial_last_page(pool_cls, name)
    search(_run_pages(pool_cls), _page_ops, trials=150, seed=seed, what="check_free_pages", keep=2)
    _looks_at_each_block_once(pool_cls, name)
    passed("free pages right on 150 random pools, in work linear in the pool")


_PER_BLOCK = 10  # Python lines plus container entries touched, per block of the pool


def _looks_at_each_block_once(pool_cls: type, name: str, size: int = 2_000) -> None:
    """free_pages may look at every block (O(blocks)), but not search a list for each one
    (O(blocks x free blocks)): its work is counted, never timed."""
    pool = call(
        f"pool = {name}({size}, 16, blocks_per_page=4)", pool_cls, size, 16, blocks_per_page=4
    )
    call(f"pool.allocate({size // 2})", pool.allocate, size // 2)
    meter = Meter()
    instrument(pool, meter, "self")
    lines = count_lines_executed(lambda: call("pool.free_pages()", pool.free_pages))
    cost = lines + meter.total
    if cost > _PER_BLOCK * size + 100:
        raise CheckFailed(
            f"free_pages() cost {cost:,} units of work (Python lines run plus container "
            f"entries touched) in a {size:,}-block pool with {size // 2:,} blocks in use, "
            f"more than {_PER_BLOCK} per block"
            + (f", mostly by {describe_touches(meter, 1)}" if meter.total > lines else "")
            + ": it may look at each block once, but never search a list for each block "
            "(that is O(blocks x free blocks)); read the reference counts instead."
        )


def _partial_last_page(pool_cls: type, name: str) -> None:
    """10 blocks in pages of 4: refuse (as BlockPool does) or count blocks 8-9 as page 2."""
    r = Replay(f"pool = {name}(10, 16, blocks_per_page=4)")
    try:
        pool = pool_cls(10, 16, blocks_per_page=4)
    except InvalidArgument:
        return  # refused, like BlockPool: pages must tile the pool
    except Exception as exc:
        raise CheckFailed(
            f"`{name}(10, 16, blocks_per_page=4)` raised {type(exc).__name__}: {exc}. Either "
            "refuse with InvalidArgument (pages must tile the pool, as BlockPool does) or treat "
            "blocks 8 and 9 as a shorter last page."
        ) from None

    def scenario(r: Replay) -> None:
        expect_read(
            r,
            "pool.free_pages()",
            pool.free_pages,
            [0, 1, 2],
            "blocks 8-9 form a shorter page 2; dropping the last partial page "
            "(num_blocks // blocks_per_page) hides them. Refuse such a pool with "
            "InvalidArgument, as BlockPool does, or count the partial page",
        )
        held = r.run("held = pool.allocate(10)", pool.allocate, 10)
        tail = [b for b in held if b >= 8]
        head = [b for b in held if b < 8]
        run_batch(r, f"pool.release({head})", pool.release, head)
        expect_read(
            r,
            "pool.free_pages()",
            pool.free_pages,
            [0, 1],
            f"blocks {tail} of the partial last page are in use: dropping the last partial "
            "page (num_blocks // blocks_per_page) hides them. Refuse such a pool with "
            "InvalidArgument, as BlockPool does, or count the partial page",
        )

    fixed("Every step of the check", scenario, r)


def _page_ops(rng: random.Random) -> list[Any]:
    pages, per_page = rng.randint(1, 6), rng.randint(1, 5)
    ops: list[Any] = [pages, per_page]
    for _ in range(12):
        ops.append((rng.choice(["allocate", "release"]), rng.random()))
    return ops


def _run_pages(pool_cls: type) -> Callable[[list[Any], Replay], None]:
    def run(ops: list[Any], r: Replay) -> None:
        pages, per_page = ops[0], ops[1]
        n = pages * per_page
        pool = r.run(
            f"pool = {pool_name(pool_cls)}({n}, 16, blocks_per_page={per_page})",
            pool_cls,
            n,
            16,
            blocks_per_page=per_page,
        )
        held: list[int] = []
        for kind, arg in ops[2:]:
            rng = random.Random(arg)
            if kind == "allocate":
                k = rng.randint(0, n - len(held))
                held += r.run(f"pool.allocate({k})", pool.allocate, k)
            elif held:
                batch = rng.sample(held, rng.randint(1, len(held)))
                for b in batch:
                    held.remove(b)
                run_batch(r, f"pool.release({batch})", pool.release, batch)
            free = r.read("pool.num_free", lambda: pool.num_free)
            if free != n - len(held):
                r.fail(
                    "num_free wrong",
                    f"after the last line, num_free should be {n - len(held)} (the blocks with "
                    f"no reference), your pool says {free}: a released block goes back on the "
                    "free list, an allocated one leaves it (exercises 1 and 2)",
                )
            busy = {b // per_page for b in held}
            want = [p for p in range(pages) if p not in busy]
            got = r.run("pool.free_pages()", pool.free_pages)
            if not isinstance(got, list) or got != want:
                why = (
                    "list them in increasing order"
                    if isinstance(got, list | tuple | set) and sorted(got) == want
                    else "a page is free when every one of its blocks is free"
                )
                r.fail(
                    f"free_pages wrong: {why}",
                    f"with blocks {sorted(held)} in use (pages of {per_page}), free_pages() "
                    f"should be {want}, got {got!r}: {why}",
                )

    return run
