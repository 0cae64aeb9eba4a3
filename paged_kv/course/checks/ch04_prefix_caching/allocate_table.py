"""Exercise 3 of chapter 04: the all-or-nothing add. The hits are shared and fresh blocks
allocated only after checking that they fit, so a refused add changes nothing, not even the
eviction policy's order or counts."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from paged_kv.cache.block_pool import BlockPool
from paged_kv.cache.eviction import LRU
from paged_kv.course.checks.failures import exercise, passed
from paged_kv.course.checks.replay import Replay, fixed, search
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

    def run(ops: list[Any], r: Replay) -> None:
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
        if extra > available:
            err = r.raises(OutOfBlocks, line, fn, pool, list(hits), want_n)
            if _pool_state(pool) != before or policy.calls or evicted:
                r.fail(
                    "not all or nothing",
                    "a refused add must change nothing, not even the eviction policy's order "
                    f"or counts; the pool's calls to its policy were {policy.calls or 'none'}"
                    + (f", blocks {evicted} were evicted" if evicted else "")
                    + ". Check that the fresh blocks fit before taking any reference (sharing "
                    "then undoing moves the hits in the policy's order)",
                )
            if (err.requested, err.available) != (extra, available):
                why = (
                    f"the {revived} cached hit(s) stop being evictable once shared, so only "
                    f"{available} of the {twin.num_available} free-or-cached blocks can be had"
                    if revived
                    else f"{available} blocks are free or evictable"
                )
                r.fail(
                    "OutOfBlocks fields",
                    f"OutOfBlocks should say requested={extra}, "
                    f"available={available} ({why}); got requested={err.requested}, "
                    f"available={err.available}",
                )
            return
        if extra == available and revived and extra:
            r.note(
                f"# {extra} fresh blocks fit exactly: {revived} of the hits are cached, so "
                "they stop being evictable once shared"
            )
        table = r.run(line, fn, pool, list(hits), want_n)
        gone = [b for b in evicted if b in hits]
        if gone:
            r.fail(
                "evicted a hit",
                f"blocks {gone} were hits, but your allocation evicted "
                "them (their content is gone, and the table would read another prompt's "
                "K/V): share the hits first, so that they are in use and cannot be evicted",
            )
        table = list(table) if isinstance(table, list | tuple) else table
        if not isinstance(table, list) or table[: len(hits)] != hits or len(table) != want_n:
            r.fail(
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
            r.fail(
                "references",
                f"after the add, the table's blocks should have reference "
                f"counts {want_refs} (one more on each hit, 1 on each fresh block), but "
                f"they have {refs}",
            )
        counts = (pool.num_free, pool.num_cached, pool.num_in_use)
        want_counts = (twin.num_free, twin.num_cached, twin.num_in_use)
        if counts != want_counts:
            r.fail(
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

    fixed("Every step of the check", _allocate_table_scenario(fn), Replay())
    search(run, make, trials=400, seed=seed, what="check_allocate_table", keep=6)
    passed("fit checked before any reference, on 400 random trials")


def _allocate_table_scenario(fn: Callable[..., Any]) -> Callable[[Replay], None]:
    """A 4-block pool: one cached hit, one other cached block, two free. 4 fresh blocks do not
    fit (the hit stops being evictable once shared), 3 fit exactly."""

    def scenario(r: Replay) -> None:
        policy = RecordingLRU()
        pool = BlockPool(4, 4, eviction=policy)
        r.note("pool = BlockPool(4, 4)")
        r.run("pool.allocate(2)", pool.allocate, 2)
        r.run("pool.keep_content([0, 1])", pool.keep_content, [0, 1])
        r.run("pool.release([0, 1])", pool.release, [0, 1])
        r.note("# blocks 0 and 1 are cached, 2 and 3 free; block 0 is a hit")
        policy.calls.clear()
        err = r.raises(OutOfBlocks, "allocate_table(pool, [0], 5)", fn, pool, [0], 5)
        if policy.calls or pool.ref_count(0) != 0 or pool.num_free != 2:
            r.fail(
                "not all or nothing",
                "a refused add must change nothing, not even the eviction policy's order or "
                f"counts, but the pool made these calls to its policy: {policy.calls}; check "
                "that the fresh blocks fit before taking any reference (sharing, then undoing, "
                "moves the hits in the policy's order)",
            )
        if (err.requested, err.available) != (4, 3):
            r.fail(
                "OutOfBlocks fields",
                "4 fresh blocks are needed; block 1 (cached) and "
                "blocks 2-3 (free) could be had, but not block 0, the hit: it stops being "
                "evictable once shared. So OutOfBlocks(requested=4, available=3); got "
                f"requested={err.requested}, available={err.available}",
            )
        table = r.run("allocate_table(pool, [0], 4)", fn, pool, [0], 4)
        if not isinstance(table, list | tuple) or list(table)[:1] != [0] or len(table) != 4:
            r.fail(
                "table",
                f"3 fresh blocks fit exactly (2 free, 1 evictable); the table "
                f"should be [0] followed by 3 fresh blocks, got {table!r}",
            )

    return scenario


def _pool_state(pool: BlockPool) -> tuple:
    return tuple((pool.ref_count(b), pool.state(b)) for b in range(pool.num_blocks)), (
        pool.num_free,
        pool.num_cached,
        list(pool.policy._order),  # type: ignore[union-attr]
    )
