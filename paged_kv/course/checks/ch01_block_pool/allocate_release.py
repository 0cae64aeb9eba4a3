"""Exercises 1 and 2 of chapter 01: `allocate` hands out distinct blocks, all or nothing;
`share` and `release` count references and refuse a bad batch whole."""

from __future__ import annotations

from paged_kv.course.checks.ch01_block_pool.pool_trials import (
    expect_freed,
    expect_fresh_ids,
    expect_out_of_blocks,
    expect_read,
    expect_refs,
    not_an_id,
    pool_name,
    pool_ops,
    raises_batch,
    run_batch,
    run_pool_ops,
)
from paged_kv.course.checks.failures import exercise, passed
from paged_kv.course.checks.replay import Replay, fixed, search
from paged_kv.errors import InvalidBlock


@exercise(1, "allocate")
def check_allocate(pool_cls: type, *, seed: int = 0) -> None:
    """`pool_cls(num_blocks, block_size)` hands out distinct ids at ref count 1, all or nothing."""
    name = pool_name(pool_cls)

    def scenario(r: Replay) -> None:
        pool = r.run(f"pool = {name}(8, 16)", pool_cls, 8, 16)
        expect_read(r, "pool.num_free", lambda: pool.num_free, 8, "a new pool has every block free")
        ids = r.run("a = pool.allocate(3)", pool.allocate, 3)
        expect_fresh_ids(r, ids, 3, 8, set(), "allocate(3)")
        expect_refs(r, pool, ids, 1, "each allocated block has reference count 1")
        expect_read(r, "pool.num_free", lambda: pool.num_free, 5, "3 of 8 blocks are in use")
        expect_read(
            r, "pool.allocate(0)", lambda: pool.allocate(0), [], "allocate(0) takes nothing"
        )
        expect_out_of_blocks(r, pool, "pool.allocate(6)", lambda: pool.allocate(6), 6, 5)
        expect_read(
            r,
            "pool.num_free",
            lambda: pool.num_free,
            5,
            "a refused allocate must change nothing: check the free count before taking any block",
        )
        rest = r.run("b = pool.allocate(5)", pool.allocate, 5)
        expect_fresh_ids(r, rest, 5, 8, set(ids), "allocate(5) with 5 blocks free")
        expect_out_of_blocks(r, pool, "pool.allocate(1)", lambda: pool.allocate(1), 1, 0)

    fixed("Every step of the check", scenario, Replay())
    search(
        run_pool_ops(pool_cls, with_release=False),
        pool_ops(with_release=False),
        trials=60,
        seed=seed,
        what="check_allocate",
    )
    passed("distinct blocks, all or nothing, as BlockPool on 60 random trials")


@exercise(2, "share and release")
def check_release(pool_cls: type, *, seed: int = 0) -> None:
    """`share(ids)` adds a reference, `release(ids)` drops one and frees a block at zero;
    both validate the whole batch first (foreign or negative ids, free blocks, double frees)
    and change nothing when they refuse."""
    name = pool_name(pool_cls)

    def scenario(r: Replay) -> None:
        pool = r.run(f"pool = {name}(4, 16)", pool_cls, 4, 16)
        a, b = r.run("a, b = pool.allocate(2)", pool.allocate, 2)
        r.lines[-1] = f"a, b = pool.allocate(2)  # returned {[a, b]}"
        for bad in (-1, 4) if hasattr(pool, "ref_count") else ():
            r.raises(
                InvalidBlock, f"pool.ref_count({bad})", pool.ref_count, bad, why=not_an_id(bad, 4)
            )
        returned = [(run_batch(r, f"pool.release([{a}])", pool.release, [a]), [a], [a])]
        expect_read(
            r,
            "pool.num_free",
            lambda: pool.num_free,
            3,
            f"block {a} lost its last reference, so it is free again: back on the free list",
        )
        raises_batch(
            r,
            InvalidBlock,
            f"pool.release([{a}])",
            pool.release,
            [a],
            why=f"block {a} was released twice: a double free",
        )
        expect_read(
            r, "pool.num_free", lambda: pool.num_free, 3, "a refused release changes nothing"
        )
        a = r.run("a = pool.allocate(1)[0]", lambda: pool.allocate(1)[0])
        run_batch(r, f"pool.share([{a}])", pool.share, [a])
        expect_refs(r, pool, [a], 2, "share adds one reference")
        returned.append((run_batch(r, f"pool.release([{a}])", pool.release, [a]), [a], []))
        expect_refs(r, pool, [a], 1, "a block whose references remain stays in use")
        expect_read(r, "pool.num_free", lambda: pool.num_free, 2, "blocks a and b are still in use")
        returned.append((run_batch(r, f"pool.release([{a}])", pool.release, [a]), [a], [a]))
        expect_read(r, "pool.num_free", lambda: pool.num_free, 3, "block a lost its last reference")
        raises_batch(
            r,
            InvalidBlock,
            f"pool.release([{a}])",
            pool.release,
            [a],
            why=f"block {a} was released twice: a double free",
        )
        raises_batch(
            r,
            InvalidBlock,
            f"pool.release([{b}, {b}])",
            pool.release,
            [b, b],
            why=f"block {b} has one reference, released twice in one call",
        )
        expect_refs(r, pool, [b], 1, "a refused release changes nothing, not even for the first id")
        raises_batch(
            r, InvalidBlock, f"pool.release([{b}, -1])", pool.release, [b, -1], not_an_id(-1, 4)
        )
        expect_refs(r, pool, [b], 1, "a refused release changes nothing")
        raises_batch(r, InvalidBlock, "pool.release([99])", pool.release, [99], not_an_id(99, 4))
        raises_batch(
            r,
            InvalidBlock,
            f"pool.share([{b}, {a}])",
            pool.share,
            [b, a],
            why=f"block {a} is free: allocate it before sharing",
        )
        expect_refs(r, pool, [b], 1, f"sharing free block {a} is refused, and nothing changes")
        raises_batch(
            r, InvalidBlock, f"pool.share([{b}, -1])", pool.share, [b, -1], not_an_id(-1, 4)
        )
        expect_refs(r, pool, [b], 1, "a refused share changes nothing")
        run_batch(r, f"pool.share([{b}, {b}])", pool.share, [b, b])
        expect_refs(r, pool, [b], 3, "each id in the batch adds one reference")
        returned.append(
            (
                run_batch(r, f"pool.release([{b}, {b}, {b}])", pool.release, [b, b, b]),
                [b, b, b],
                [b],
            )
        )
        for freed, batch, want in returned:
            expect_freed(r, batch, freed, want)
        again = r.run("again = pool.allocate(4)", pool.allocate, 4)
        expect_fresh_ids(r, again, 4, 4, set(), "allocate(4) on an empty pool")
        backwards = sorted(again, reverse=True)
        run_batch(r, f"pool.share({backwards})", pool.share, backwards)
        expect_refs(r, pool, backwards, 2, "share adds one reference to each block")
        freed = run_batch(r, f"pool.release({backwards})", pool.release, backwards)
        expect_freed(r, backwards, freed, [])
        freed = run_batch(r, f"pool.release({backwards})", pool.release, backwards)
        expect_freed(r, backwards, freed, sorted(backwards))

    fixed("Every step of the check", scenario, Replay())
    search(
        run_pool_ops(pool_cls, with_release=True),
        pool_ops(with_release=True),
        trials=80,
        seed=seed,
        what="check_release",
    )
    passed("references counted, bad batches refused, as BlockPool on 80 random trials")
