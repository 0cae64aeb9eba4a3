"""Exercise 3 of chapter 04: the all-or-nothing add. The hits are shared and fresh blocks
allocated only after checking that they fit, so a refused add changes nothing, not even the
eviction policy's order or counts. The caller's list of hits is left as it was, an error of the
pool is let through (never a short table), and the work grows with the table, not the pool
(Python lines counted in a small and a large pool)."""

from __future__ import annotations

import random
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paged_kv.cache.block_pool import BlockPool
from paged_kv.cache.eviction import LRU
from paged_kv.course.checks import causes
from paged_kv.course.checks.cost import constant_work
from paged_kv.course.checks.failures import (
    call,
    exercise,
    passed,
    short_repr,
    where_raised,
)
from paged_kv.course.checks.harness import Mismatch, Trial, fail_with, fixed, search
from paged_kv.errors import OutOfBlocks


class RecordingLRU(LRU):
    """LRU that logs every call the pool makes, so a check can see that nothing happened."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def touch(self, block_id: int) -> None:
        self.calls.append(f"touch({block_id})")
        super().touch(block_id)

    def make_evictable(self, block_id: int) -> None:
        self.calls.append(f"make_evictable({block_id})")
        super().make_evictable(block_id)

    def revive(self, block_id: int) -> None:
        self.calls.append(f"revive({block_id})")
        super().revive(block_id)

    def evict(self) -> int:
        block_id = super().evict()
        self.calls.append(f"evict()->{block_id}")
        return block_id


@exercise(3, "allocate_table")
def check_allocate_table(fn: Callable[..., list[int]], *, seed: int = 0) -> None:
    """`fn(pool, hits, num_blocks)` returns the new sequence's table, the hit blocks (shared)
    followed by fresh ones, or raises `OutOfBlocks` having changed nothing, not even the
    eviction policy's order or counts: the fit check comes before any reference is taken."""

    def run(ops: list[Any], r: Trial) -> None:
        num_blocks, allocated, kept, released, hits_at, extra = ops
        policy = RecordingLRU()
        evicted: list[int] = []
        pool = BlockPool(num_blocks, 4, eviction=policy, on_evict=evicted.append)
        twin = BlockPool(num_blocks, 4, eviction=LRU())
        r.note(f"pool = BlockPool({num_blocks}, 4)")
        for p in (pool, twin):
            ids = p.allocate(allocated)
            p.keep_content([b for b in ids if b in kept])
            p.release([b for b in ids if b in released])
        r.note(f"pool.allocate({allocated})  # blocks 0..{allocated - 1}")
        r.note(f"pool.keep_content({sorted(b for b in range(allocated) if b in kept)})")
        r.note(f"pool.release({sorted(b for b in range(allocated) if b in released)})")
        usable = [b for b in range(allocated) if b not in released or b in kept]
        hits = [usable[i % len(usable)] for i in hits_at] if usable else []
        hits = list(dict.fromkeys(hits))  # distinct, in order
        want_n = len(hits) + extra
        before = _pool_state(pool)
        policy.calls.clear()
        evicted.clear()
        revived = sum(1 for b in hits if twin.ref_count(b) == 0)
        available = twin.num_available - revived
        line = f"allocate_table(pool, {hits}, {want_n})"
        given = list(hits)
        if extra > available:
            why = (
                f"the {revived} cached hit(s) stop being evictable once shared, so only "
                f"{available} of the {twin.num_available} free-or-cached blocks can be had"
                if revived
                else f"{available} blocks are free or evictable"
            )
            refusal = OutOfBlocks("", requested=extra, available=available)
            err = r.refuses(line, lambda: fn(pool, given, want_n), refusal, why=why)
            _expect_hits_kept(r, line, hits, given)
            if _pool_state(pool) != before or policy.calls or evicted:
                changed = f"the pool's calls to its policy were {policy.calls or 'none'}" + (
                    f", blocks {evicted} were evicted" if evicted else ""
                )
                fail_with(
                    causes.NOT_ALL_OR_NOTHING,
                    "not all or nothing",
                    _refusal_message(err, policy.calls, hits, extra, available, revived, changed),
                )
            return
        if extra == available and revived and extra:
            r.note(
                f"# {extra} fresh blocks fit exactly: {revived} of the hits are cached, so "
                "they stop being evictable once shared"
            )
        try:
            table = r.run(line, fn, pool, given, want_n)
        except Mismatch as failure:
            if isinstance(failure.__cause__, OutOfBlocks):
                fail_with(
                    causes.RAISED, "refused a fit", _fits(line, failure.__cause__, extra, available)
                )
            raise
        _expect_hits_kept(r, line, hits, given)
        gone = [b for b in evicted if b in hits]
        if gone:
            fail_with(
                causes.WRONG_STATE,
                "evicted a hit",
                f"blocks {gone} were hits, but your allocation evicted "
                "them (their content is gone, and the table would read another prompt's "
                "K/V): share the hits first, so that they are in use and cannot be evicted",
            )
        table = list(table) if isinstance(table, list | tuple) else table
        if not isinstance(table, list) or table[: len(hits)] != hits or len(table) != want_n:
            fail_with(
                causes.WRONG_RESULT,
                "table",
                f"the table should be the {len(hits)} hits {hits} followed by "
                f"{extra} fresh blocks ({want_n} in all); got {table!r}",
            )
        twin.share(hits)
        twin.allocate(extra)
        fresh = table[len(hits) :]
        refs = [pool.ref_count(b) for b in table]
        want_refs = [twin.ref_count(b) for b in hits] + [1] * extra
        if refs != want_refs or len(set(fresh) | set(hits)) != want_n:
            fail_with(
                causes.WRONG_STATE,
                "references",
                f"after the add, the table's blocks should have reference "
                f"counts {want_refs} (one more on each hit, 1 on each fresh block), but "
                f"they have {refs}",
            )
        counts = (pool.num_free, pool.num_cached, pool.num_in_use)
        want_counts = (twin.num_free, twin.num_cached, twin.num_in_use)
        if counts != want_counts:
            fail_with(
                causes.WRONG_STATE,
                "pool counts",
                f"(free, cached, in use) blocks should be {want_counts}, they are {counts}",
            )

    def make(rng: random.Random) -> list[Any]:
        num_blocks = rng.randint(3, 10)
        allocated = rng.randint(1, num_blocks)
        kept = {b for b in range(allocated) if rng.random() < 0.6}
        released = {b for b in range(allocated) if rng.random() < 0.6}
        hits_at = [rng.randrange(10) for _ in range(rng.randint(0, 3))]
        extra = rng.randint(0, num_blocks)
        return [num_blocks, allocated, kept, released, hits_at, extra]

    fixed(_allocate_table_scenario(fn))
    search(run, make, trials=400, seed=seed, what="check_allocate_table", keep=6)
    fixed(_failing_allocate_scenario(fn))
    _work_grows_with_the_table(fn)
    passed("fit checked before any reference, on 400 random trials; no scan of the pool")


def _expect_hits_kept(r: Trial, line: str, hits: list[int], given: list[int]) -> None:
    if given != hits:
        fail_with(
            causes.MUTATES_ARGUMENT,
            "changed the hits",
            f"`{line}` changed the list of hits it was given (it was {hits}, it is {given} "
            "after the call): the list is the caller's, who keeps using it; build the table "
            "as a new list ([*hits, *fresh])",
        )


def _raised_by_pool_allocate(err: BaseException) -> bool:
    """Did `err` come from `BlockPool.allocate` (the pool refusing), not the learner's raise?"""
    frames = traceback.extract_tb(err.__traceback__)
    return bool(frames) and (Path(frames[-1].filename).name, frames[-1].name) == (
        "block_pool.py",
        "allocate",
    )


def _refusal_message(
    err: BaseException,
    calls: list[str],
    hits: list[int],
    fresh: int,
    available: int,
    cached: int,
    changed: str,
) -> str:
    """Why a refused add changed the pool, from where the refusal came from."""
    undone = any(c.startswith("make_evictable") for c in calls)
    if _raised_by_pool_allocate(err) and not undone:
        counted = (
            f"pool.num_available ({available + cached}) counts the {cached} cached hit(s) "
            f"among {hits}, but a hit stops being evictable once shared, so only {available} "
            f"block(s) can be had and {fresh} fresh ones do not fit; your code"
            if cached
            else f"{fresh} fresh blocks do not fit ({available} can be had), but your code"
        )
        return (
            f"{counted} shared the hits before pool.allocate refused, and a refused add must "
            f"change nothing ({changed}). Subtract the cached hits (pool.ref_count(b) == 0) "
            "from pool.num_available, and raise OutOfBlocks before pool.share"
        )
    return (
        "a refused add must change nothing, not even the eviction policy's order or counts; "
        f"{changed}. Check that the fresh blocks fit before taking any reference (sharing, "
        "then undoing, moves the hits in the policy's order)"
    )


def _fits(line: str, err: BaseException, fresh: int, available: int) -> str:
    return (
        f"{fresh} fresh block(s) fit exactly ({available} can be had): refuse only when more "
        f"are needed than can be had (fresh > available), never when they are equal; `{line}` "
        f"raised OutOfBlocks: {err}{where_raised(err)}"
    )


def _failing_allocate_scenario(fn: Callable[..., Any]) -> Callable[[Trial], None]:
    """The pool's allocate fails where the fit check said it would not: the error must come
    through, not a short table (and the references taken would leak)."""

    class FailingPool(BlockPool):
        def allocate(self, n: int = 1) -> list[int]:
            raise OutOfBlocks(
                "the check made pool.allocate fail", requested=n, available=self.num_available
            )

    def scenario(r: Trial) -> None:
        pool = FailingPool(4, 4)
        pool.keep_content(BlockPool.allocate(pool, 1))
        pool.release([0])
        r.note("pool = BlockPool(4, 4)")
        r.note("pool.allocate(1)  # returned [0]")
        r.note("pool.keep_content([0])")
        r.note("pool.release([0])  # block 0 is cached, 1-3 free; block 0 is a hit")
        r.note("# the check makes pool.allocate raise OutOfBlocks, as a failing pool would")
        line = "allocate_table(pool, [0], 3)"
        r.lines.append(line)
        try:
            table = fn(pool, [0], 3)
        except NotImplementedError:
            raise
        except Exception:
            return  # the error came through
        if isinstance(table, list | tuple) and len(table) == 3:
            return  # a whole table, without the failing allocate: nothing was hidden
        r.lines[-1] = f"{line}  # returned {short_repr(table, 80)}"
        leaked = " (block 0 keeps the one pool.share took)" if pool.ref_count(0) else ""
        fail_with(
            causes.MISSING_REFUSAL,
            "swallowed an error",
            f"when pool.allocate raised OutOfBlocks, `{line}` returned "
            f"{short_repr(table, 80)} instead of letting the error through: catching it hides "
            f"the failure, returns a table that is too short, and leaks references{leaked}. "
            "Catch nothing around share and allocate (the fit is checked before, with "
            "pool.num_available)",
        )

    return scenario


_POOL_SIZES = (64, 4096)


def _work_grows_with_the_table(fn: Callable[..., Any]) -> None:
    """The same add (2 cached hits, 2 fresh blocks) costs as much in a 64-block pool as in a
    4,096-block one: nothing scans the pool."""

    def build(size: int) -> tuple[BlockPool, int]:
        pool = BlockPool(size, 4)
        pool.keep_content(pool.allocate(4))
        pool.release([0, 1, 2, 3])
        return pool, size

    constant_work(
        build,
        lambda pool, size: call(
            f"allocate_table(pool, [0, 1], 4), {size:,} blocks", fn, pool, [0, 1], 4
        ),
        _POOL_SIZES,
        what="allocate_table(pool, [0, 1], 4)",
        unit="blocks in the pool",
        hint="Count the cached hits among the hits only (pool.ref_count(b) == 0 for each): the "
        "work must grow with the table, not the pool.",
    )


def _allocate_table_scenario(fn: Callable[..., Any]) -> Callable[[Trial], None]:
    """A 4-block pool: one cached hit, one other cached block, two free. 4 fresh blocks do not
    fit (the hit stops being evictable once shared), 3 fit exactly."""

    def scenario(r: Trial) -> None:
        policy = RecordingLRU()
        pool = BlockPool(4, 4, eviction=policy)
        r.note("pool = BlockPool(4, 4)")
        r.run("pool.allocate(2)", pool.allocate, 2)
        r.run("pool.keep_content([0, 1])", pool.keep_content, [0, 1])
        r.run("pool.release([0, 1])", pool.release, [0, 1])
        r.note("# blocks 0 and 1 are cached, 2 and 3 free; block 0 is a hit")
        policy.calls.clear()
        given = [0]
        why = "block 1 (cached) and blocks 2-3 (free) can be had, not block 0, the hit"
        refusal = OutOfBlocks("", requested=4, available=3)
        err = r.refuses(
            "allocate_table(pool, [0], 5)", lambda: fn(pool, given, 5), refusal, why=why
        )
        _expect_hits_kept(r, "allocate_table(pool, [0], 5)", [0], given)
        if policy.calls or pool.ref_count(0) != 0 or pool.num_free != 2:
            changed = f"the pool made these calls to its policy: {policy.calls}"
            fail_with(
                causes.NOT_ALL_OR_NOTHING,
                "not all or nothing",
                _refusal_message(err, policy.calls, [0], 4, 3, 1, changed),
            )
        given = [0]
        try:
            table = r.run("allocate_table(pool, [0], 4)", fn, pool, given, 4)
        except Mismatch as failure:
            if isinstance(failure.__cause__, OutOfBlocks):
                fail_with(
                    causes.RAISED,
                    "refused a fit",
                    _fits("allocate_table(pool, [0], 4)", failure.__cause__, 3, 3),
                )
            raise
        _expect_hits_kept(r, "allocate_table(pool, [0], 4)", [0], given)
        if not isinstance(table, list | tuple) or list(table)[:1] != [0] or len(table) != 4:
            fail_with(
                causes.WRONG_RESULT,
                "table",
                f"3 fresh blocks fit exactly (2 free, 1 evictable); the table "
                f"should be [0] followed by 3 fresh blocks, got {table!r}",
            )

    return scenario


def _pool_state(pool: BlockPool) -> tuple:
    return tuple((pool.ref_count(b), pool.state(b)) for b in range(pool.num_blocks)), (
        pool.num_free,
        pool.num_cached,
        list(pool.policy._order),  # type: ignore[union-attr]  # the LRU this check builds
    )
