"""Chapter 01 checks: a block pool allocates, shares, releases and frees pages like
`BlockPool`, in constant work per block.

The pool under test has `BlockPool`'s core interface: `pool_cls(num_blocks, block_size,
blocks_per_page=None)`, `num_free`, `ref_count(b)`, `allocate(n)`, `share(ids)`,
`release(ids)` (returning the blocks that lost their last reference) and `free_pages()`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from paged_kv.cache.block_pool import BlockPool
from paged_kv.course.checks.cost import (
    Meter,
    count_lines_executed,
    describe_touches,
    grows_in_time,
    instrument,
)
from paged_kv.course.checks.support import (
    CheckFailed,
    Replay,
    _label,
    call,
    exercise,
    fixed,
    passed,
    search,
)
from paged_kv.errors import InvalidArgument, InvalidBlock, OutOfBlocks


def _name(pool_cls: Any) -> str:
    func = getattr(pool_cls, "func", pool_cls)  # a functools.partial names its function
    return getattr(func, "__name__", "Pool")


# -- exercise 1: allocate --------------------------------------------------------------------


@exercise(1, "allocate")
def check_allocate(pool_cls: type, *, seed: int = 0) -> None:
    """`pool_cls(num_blocks, block_size)` hands out distinct ids at ref count 1, all or nothing."""
    name = _name(pool_cls)

    def scenario(r: Replay) -> None:
        pool = r.run(f"pool = {name}(8, 16)", pool_cls, 8, 16)
        _same(r, "pool.num_free", lambda: pool.num_free, 8, "a new pool has every block free")
        ids = r.run("a = pool.allocate(3)", pool.allocate, 3)
        _fresh_ids(r, ids, 3, 8, set(), "allocate(3)")
        _refs(r, pool, ids, 1, "each allocated block has reference count 1")
        _same(r, "pool.num_free", lambda: pool.num_free, 5, "3 of 8 blocks are in use")
        _same(r, "pool.allocate(0)", lambda: pool.allocate(0), [], "allocate(0) takes nothing")
        _out_of_blocks(r, pool, "pool.allocate(6)", lambda: pool.allocate(6), 6, 5)
        _same(
            r,
            "pool.num_free",
            lambda: pool.num_free,
            5,
            "a refused allocate must change nothing: check the free count before taking any block",
        )
        rest = r.run("b = pool.allocate(5)", pool.allocate, 5)
        _fresh_ids(r, rest, 5, 8, set(ids), "allocate(5) with 5 blocks free")
        _out_of_blocks(r, pool, "pool.allocate(1)", lambda: pool.allocate(1), 1, 0)

    fixed("Every step of the check", scenario, Replay())
    search(
        _run_pool_ops(pool_cls, with_release=False),
        _pool_ops(with_release=False),
        trials=60,
        seed=seed,
        what="check_allocate",
    )
    passed("distinct blocks, all or nothing, as BlockPool on 60 random trials")


def _same(r: Replay, line: str, get: Callable[[], Any], want: Any, why: str) -> None:
    got = r.read(line, get)
    if isinstance(want, list) and not isinstance(got, list) and _sorted(got) == want:
        why = "return a list, in increasing order"
    if got != want:
        r.fail(f"{line}: {got!r}", f"`{line}` should be {want!r} ({why}), got {got!r}")


def _sorted(value: Any) -> Any:
    try:
        return sorted(value)
    except TypeError:
        return value


def _fresh_ids(r: Replay, ids: Any, n: int, size: int, in_use: set[int], what: str) -> None:
    if not isinstance(ids, list):
        r.fail(f"{what}: not a list", f"{what} should return a list of block ids, got {ids!r}")
    if len(ids) != n:
        r.fail(f"{what}: {len(ids)} ids", f"{what} returned {len(ids)} ids: {ids}")
    if len(set(ids)) != n:
        r.fail(f"{what}: duplicate", f"{what} returned the same block twice: {ids}")
    if not all(type(b) is int and 0 <= b < size for b in ids):
        r.fail(f"{what}: id range", f"{what} returned ids outside 0..{size - 1}: {ids}")
    if set(ids) & in_use:
        r.fail(
            f"{what}: in use",
            f"{what} returned {sorted(set(ids) & in_use)}, which are still in use",
        )


def _refs(r: Replay, pool: Any, ids: list[int], want: int, why: str) -> None:
    if not hasattr(pool, "ref_count") and _label.get() == "Exercise 1 (allocate)":
        return  # exercise 1 does not need ref_count yet (the lecture's tiny pool has none)
    refs = [r.read(f"pool.ref_count({b})", pool.ref_count, b) for b in ids]
    if any(ref != want for ref in refs):
        r.fail(
            "ref counts",
            f"the reference counts of blocks {ids} are {refs}; expected {want} each ({why})",
        )


def _out_of_blocks(
    r: Replay, pool: Any, line: str, action: Callable[[], Any], requested: int, available: int
) -> None:
    err = r.raises(OutOfBlocks, line, action)
    if (err.requested, err.available) != (requested, available):
        r.fail(
            "OutOfBlocks fields",
            f"`{line}` raised OutOfBlocks(requested={err.requested}, available="
            f"{err.available}); it should say requested={requested}, available={available} "
            "(available: the blocks that are free now, so the caller knows how short it is)",
        )


def _pool_ops(*, with_release: bool) -> Callable[[random.Random], list[Any]]:
    """A pool size, then intents: ("allocate", k), ("share" | "release", seed), ("bad", seed)."""

    def make(rng: random.Random) -> list[Any]:
        n = rng.randint(1, 24)
        kinds = ["allocate"] + (["share", "release", "release", "bad"] if with_release else [])
        ops: list[Any] = [n]
        for _ in range(50):
            kind = rng.choice(kinds)
            arg = rng.randint(0, max(1, n // 3) + 1) if kind == "allocate" else rng.random()
            ops.append((kind, arg))
        return ops

    return make


def _run_pool_ops(pool_cls: type, *, with_release: bool) -> Callable[[list[Any], Replay], None]:
    """Apply the intents to the learner's pool and to a `BlockPool`; compare after each."""

    def run(ops: list[Any], r: Replay) -> None:
        n = ops[0]
        pool = r.run(f"pool = {_name(pool_cls)}({n}, 16)", pool_cls, n, 16)
        ours = BlockPool(n, 16)
        mine_to_ours: dict[int, int] = {}  # learner's id -> library id, while in use
        for kind, arg in ops[1:]:
            rng = random.Random(arg) if isinstance(arg, float) else None
            held = sorted(mine_to_ours)
            if kind == "allocate":
                k = arg
                line = f"pool.allocate({k})"
                if k > ours.num_free:
                    _out_of_blocks(r, pool, line, lambda k=k: pool.allocate(k), k, ours.num_free)
                else:
                    got = r.run(line, pool.allocate, k)
                    _fresh_ids(r, got, k, n, set(held), line)
                    for mine, lib in zip(got, ours.allocate(k), strict=True):
                        mine_to_ours[mine] = lib
            elif kind in ("share", "release") and held and rng is not None:
                batch = [rng.choice(held) for _ in range(rng.randint(1, 3))]
                lib = [mine_to_ours[b] for b in batch]
                if kind == "share":
                    r.run(f"pool.share({batch})", pool.share, batch)
                    ours.share(lib)
                elif all(batch.count(b) <= ours.ref_count(mine_to_ours[b]) for b in set(batch)):
                    freed = r.run(f"pool.release({batch})", pool.release, batch)
                    lib_freed = ours.release(lib)
                    want = sorted(b for b in set(batch) if mine_to_ours[b] in lib_freed)
                    for b in want:
                        del mine_to_ours[b]
                    _compare_state(r, pool, ours, mine_to_ours, n)
                    _check_freed(r, batch, freed, want)
                else:
                    r.raises(
                        InvalidBlock, f"pool.release({batch})", pool.release, batch
                    )  # more releases than references: a double free
            elif kind == "bad" and rng is not None:
                free = [b for b in range(n) if b not in mine_to_ours]
                choices = [-1, n, n + 3]
                if free:
                    choices += [rng.choice(free)]
                bad = rng.choice(choices)
                action = rng.choice(["share", "release"])
                extra = [rng.choice(held)] if held and rng.random() < 0.5 else []
                batch = [*extra, bad]
                r.raises(InvalidBlock, f"pool.{action}({batch})", getattr(pool, action), batch)
            else:
                continue
            _compare_state(r, pool, ours, mine_to_ours, n)

    return run


def _check_freed(r: Replay, batch: list[int], freed: Any, want: list[int]) -> None:
    try:
        got = sorted(freed)
    except TypeError:
        got = freed
    if got != want:
        r.fail(
            "release's return",
            f"`pool.release({batch})` should return the blocks that lost their last reference, "
            f"{want}, but returned {freed!r}",
        )


def _compare_state(
    r: Replay, pool: Any, ours: BlockPool, mine_to_ours: dict[int, int], n: int
) -> None:
    counted = hasattr(pool, "ref_count")  # the lecture's tiny pool has no ref counts yet
    refs = r.read(
        "pool.ref_count(b)", lambda: [pool.ref_count(b) for b in range(n)] if counted else []
    )
    want = [ours.ref_count(mine_to_ours[b]) if b in mine_to_ours else 0 for b in range(n)]
    if counted and refs != want:
        bad = next(b for b in range(n) if refs[b] != want[b])
        why = (
            "a block whose references remain must stay in use"
            if refs[bad] < want[bad]
            else "a refused call must change nothing"
        )
        r.fail(
            f"ref_count wrong ({why})",
            f"after the last line, block {bad} should have reference count {want[bad]}, your "
            f"pool says {refs[bad]} ({why}); all counts should be {want}, yours are {refs}",
        )
    num_free = r.read("pool.num_free", lambda: pool.num_free)
    if num_free != ours.num_free:
        r.fail(
            "num_free wrong",
            f"after the last line, num_free should be {ours.num_free} (the blocks with "
            f"reference count 0), your pool says {num_free}",
        )


# -- exercise 1: allocate is O(1) ------------------------------------------------------------

_SIZES = (500, 20_000)  # half full: lines and entries touched
_TIMED_SIZES = (1_000, 200_000)  # fresh pools: seconds


@exercise(1, "allocate")
def check_constant_time_allocate(pool_cls: type) -> None:
    """`allocate(1)` does the same work in a pool of 10³ and of 10⁵ blocks.

    Counts Python lines and the container entries touched (work done in C included), then
    times both sizes; none of it depends on how fast the machine is.
    """

    def work(pool: Any, held: list[int]) -> None:
        for _ in range(10):
            pool.allocate(1)

    _constant_work(pool_cls, "allocate(1)", work, "allocate")
    passed("the same work per allocate in pools of 500 and 20,000 blocks")


# -- exercise 2: share and release ----------------------------------------------------------


@exercise(2, "share and release")
def check_release(pool_cls: type, *, seed: int = 0) -> None:
    """`share(ids)` adds a reference, `release(ids)` drops one and frees a block at zero;
    both validate the whole batch first (foreign or negative ids, free blocks, double frees)
    and change nothing when they refuse."""
    name = _name(pool_cls)

    def scenario(r: Replay) -> None:
        pool = r.run(f"pool = {name}(4, 16)", pool_cls, 4, 16)
        a, b = r.run("a, b = pool.allocate(2)", pool.allocate, 2)
        r.lines[-1] = f"a, b = pool.allocate(2)  # returned {[a, b]}"
        returned = [(r.run(f"pool.release([{a}])", pool.release, [a]), [a], [a])]
        r.raises(
            InvalidBlock,
            f"pool.release([{a}])",
            pool.release,
            [a],
            why=f"block {a} was released twice: a double free",
        )
        _same(r, "pool.num_free", lambda: pool.num_free, 3, "a refused release changes nothing")
        a = r.run("a = pool.allocate(1)[0]", lambda: pool.allocate(1)[0])
        r.run(f"pool.share([{a}])", pool.share, [a])
        _refs(r, pool, [a], 2, "share adds one reference")
        returned.append((r.run(f"pool.release([{a}])", pool.release, [a]), [a], []))
        _refs(r, pool, [a], 1, "a block whose references remain stays in use")
        _same(r, "pool.num_free", lambda: pool.num_free, 2, "blocks a and b are still in use")
        returned.append((r.run(f"pool.release([{a}])", pool.release, [a]), [a], [a]))
        _same(r, "pool.num_free", lambda: pool.num_free, 3, "block a lost its last reference")
        r.raises(
            InvalidBlock,
            f"pool.release([{a}])",
            pool.release,
            [a],
            why=f"block {a} was released twice: a double free",
        )
        r.raises(
            InvalidBlock,
            f"pool.release([{b}, {b}])",
            pool.release,
            [b, b],
            why=f"block {b} has one reference, released twice in one call",
        )
        _refs(r, pool, [b], 1, "a refused release changes nothing, not even for the first id")
        r.raises(InvalidBlock, f"pool.release([{b}, -1])", pool.release, [b, -1])
        _refs(r, pool, [b], 1, "block ids are 0..num_blocks-1; -1 is not one of them")
        r.raises(InvalidBlock, "pool.release([99])", pool.release, [99])
        r.raises(InvalidBlock, f"pool.share([{b}, {a}])", pool.share, [b, a])
        _refs(r, pool, [b], 1, f"sharing free block {a} is refused, and nothing changes")
        r.raises(InvalidBlock, f"pool.share([{b}, -1])", pool.share, [b, -1])
        _refs(r, pool, [b], 1, "a refused share changes nothing")
        r.run(f"pool.share([{b}, {b}])", pool.share, [b, b])
        _refs(r, pool, [b], 3, "each id in the batch adds one reference")
        returned.append(
            (r.run(f"pool.release([{b}, {b}, {b}])", pool.release, [b, b, b]), [b, b, b], [b])
        )
        for freed, batch, want in returned:
            _check_freed(r, batch, freed, want)
        again = r.run("pool.allocate(4)", pool.allocate, 4)
        _fresh_ids(r, again, 4, 4, set(), "allocate(4) on an empty pool")

    fixed("Every step of the check", scenario, Replay())
    search(
        _run_pool_ops(pool_cls, with_release=True),
        _pool_ops(with_release=True),
        trials=80,
        seed=seed,
        what="check_release",
    )
    passed("references counted, bad batches refused, as BlockPool on 80 random trials")


@exercise(2, "share and release")
def check_constant_time_release(pool_cls: type) -> None:
    """`share` and `release` of one block do the same work in a pool of 10³ and of 10⁵."""

    def share(pool: Any, held: list[int]) -> None:
        for b in held[:: max(1, len(held) // 10)][:10]:
            pool.share([b])

    def release(pool: Any, held: list[int]) -> None:
        for b in held[:: max(1, len(held) // 10)][:10]:
            pool.release([b])

    _constant_work(pool_cls, "share([b])", share, "share")
    _constant_work(pool_cls, "release([b])", release, "release")
    passed("the same work per share and release in pools of 500 and 20,000 blocks")


def _constant_work(
    pool_cls: type, what: str, work: Callable[[Any, list[int]], None], method: str
) -> None:
    """Python lines and container entries per call must not grow from the small pool to the
    large one (both half full, filled 10 blocks at a time so that a scanning allocate is caught
    early, before a quadratic fill); then seconds, on fresh pools, as a backstop."""
    name = _name(pool_cls)
    small, large = _SIZES
    fill_cost = 0
    for size in _SIZES:
        pool = call(f"pool = {name}({size}, 16)", pool_cls, size, 16)
        meter = Meter()
        instrument(pool, meter, "self")
        held: list[int] = []
        for _ in range(size // 20):
            meter.reset()
            doing = f"pool.allocate(10) on a {size:,}-block pool"
            lines = count_lines_executed(
                lambda p=pool, h=held, d=doing: h.extend(call(d, p.allocate, 10))
            )
            cost = lines + meter.total
            if size == small:
                fill_cost = max(fill_cost, cost)
            elif cost > 2 * fill_cost + 50:
                raise CheckFailed(
                    f"allocate(10) cost {fill_cost:,} (Python lines plus container entries "
                    f"touched) at most in a {small:,}-block pool, but {cost:,} in a "
                    f"{large:,}-block pool with {len(held) - 10:,} blocks already in use"
                    + (f", mostly by {describe_touches(meter, 1)}" if meter.total > lines else "")
                    + ": it scans the pool (or a container that grows with it). "
                    + _ADVICE["allocate"]
                )
        meter.reset()
        lines = count_lines_executed(
            lambda p=pool, h=held, s=size: call(
                f"10 calls of {what} on a half-full pool of {s:,} blocks", work, p, h
            )
        )
        if size == small:
            base_lines, base_touched = lines, meter.total
            continue
        if lines > 2 * base_lines + 20:
            raise CheckFailed(
                f"10 calls of {what} ran {base_lines:,} Python lines in a {small:,}-block pool "
                f"but {lines:,} in a {large:,}-block pool: it scans the pool. " + _ADVICE[method]
            )
        if meter.total > 2 * base_touched + 50:
            raise CheckFailed(
                f"10 calls of {what} touched {base_touched:,} container entries in a "
                f"{small:,}-block pool but {meter.total:,} in a {large:,}-block pool, mostly by "
                f"{describe_touches(meter, 10)}: a search, even one done in C "
                "(min, sorted, `in` on a list, list.remove, list.pop(0), list.index), grows "
                "with the pool. " + _ADVICE[method]
            )

    def make(size: int) -> tuple[Any, list[int]]:
        pool = pool_cls(size, 16)
        return pool, ([] if method == "allocate" else pool.allocate(30))

    def timed(state: tuple[Any, list[int]]) -> None:
        pool, held = state
        if method == "allocate":
            for _ in range(30):
                pool.allocate(1)
        else:
            for b in held:
                getattr(pool, method)([b])

    ratio = grows_in_time(make, timed, _TIMED_SIZES)
    if ratio is not None:
        raise CheckFailed(
            f"{what} took {ratio:,.0f}× longer in a {_TIMED_SIZES[1]:,}-block pool than in a "
            f"{_TIMED_SIZES[0]:,}-block one (the fastest of 5 rounds, measured twice): it does "
            "work that grows with the pool, in C where the line and entry counts cannot see it "
            "(a `range`, an array or a new set built on each call?). " + _ADVICE[method]
        )


_ADVICE = {
    "allocate": "Keep the free ids in a structure you can pop from without searching "
    "(a list used as a stack, or a deque).",
    "share": "A reference count per block, in a list indexed by block id, is all share needs.",
    "release": "Validate with the reference counts (one list lookup per id), never by searching "
    "the free list; push freed ids onto the free list's cheap end.",
}


# -- exercise 3: free pages ------------------------------------------------------------------


@exercise(3, "free_pages")
def check_free_pages(pool_cls: type, *, seed: int = 0) -> None:
    """`free_pages()` lists the pages whose blocks are all free, in increasing order."""
    name = _name(pool_cls)

    def scenario(r: Replay) -> None:
        pool = r.run(f"pool = {name}(8, 16, blocks_per_page=4)", pool_cls, 8, 16, blocks_per_page=4)
        _same(r, "pool.free_pages()", pool.free_pages, [0, 1], "two pages, all blocks free")
        a = r.run("a = pool.allocate(1)", pool.allocate, 1)
        page = a[0] // 4
        _same(
            r,
            "pool.free_pages()",
            pool.free_pages,
            [1 - page],
            f"block {a[0]} is in use, so its page {page} is not free",
        )
        r.run(f"pool.share({a})", pool.share, a)
        r.run(f"pool.release({a})", pool.release, a)
        _same(
            r,
            "pool.free_pages()",
            pool.free_pages,
            [1 - page],
            f"block {a[0]} still has a reference",
        )
        r.run(f"pool.release({a})", pool.release, a)
        _same(r, "pool.free_pages()", pool.free_pages, [0, 1], "every block is free again")
        try:
            plain = pool_cls(8, 16)
        except InvalidArgument:
            return  # this pool needs pages (BlockPool with allocation="pack_pages")
        r.note(f"plain = {name}(8, 16)")
        _same(r, "plain.free_pages()", plain.free_pages, [], "a pool without pages has none")

    fixed("Every step of the check", scenario, Replay())
    _partial_last_page(pool_cls, name)
    search(_run_pages(pool_cls), _page_ops, trials=150, seed=seed, what="check_free_pages", keep=2)
    passed("free pages right on 150 random pools")


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
        _same(
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
        r.run(
            f"pool.release({[b for b in held if b < 8]})", pool.release, [b for b in held if b < 8]
        )
        _same(
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
            f"pool = {_name(pool_cls)}({n}, 16, blocks_per_page={per_page})",
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
                r.run(f"pool.release({batch})", pool.release, batch)
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


__all__ = [
    "check_allocate",
    "check_constant_time_allocate",
    "check_constant_time_release",
    "check_free_pages",
    "check_release",
]
