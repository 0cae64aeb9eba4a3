"""Chapter 01 checks: a block pool allocates, shares, releases and frees pages like
`BlockPool`, in constant work per block.

The pool under test has `BlockPool`'s core interface: `pool_cls(num_blocks, block_size,
blocks_per_page=None)`, `num_free`, `ref_count(b)`, `allocate(n)`, `share(ids)`,
`release(ids)` (returning the blocks that lost their last reference) and `free_pages()`.
Random calls go to the learner's pool and to a `BlockPool` alike; the library's ids are
mapped to the ones the learner's pool handed out.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

from paged_kv.cache.block_pool import BlockPool
from paged_kv.course.checks import causes
from paged_kv.course.checks.cost import (
    Meter,
    constant_work,
    count_lines_by_function,
    grew,
    grows_in_time,
    instrument,
    work_of,
)
from paged_kv.course.checks.failures import CheckFailed, call, exercise, passed, stage
from paged_kv.course.checks.harness import Trial, search
from paged_kv.errors import InvalidArgument


def _name(pool_cls: Any) -> str:
    return getattr(getattr(pool_cls, "func", pool_cls), "__name__", "Pool")


def _draw(kinds: tuple[str, ...], pages: bool) -> Callable[[random.Random], list[Any]]:
    """A pool's size (and page size), then intents: ("allocate", k) or (kind, seed)."""

    def draw(rng: random.Random) -> list[Any]:
        per = rng.choice([None, 1, 2, 3, 4]) if pages else None
        n = rng.randint(1, 6) * (per or 4) + (rng.random() < 0.2) * rng.randint(1, 3)
        ops: list[Any] = [(n, per)]
        for _ in range(40):
            kind = rng.choice(kinds)
            ops.append((kind, rng.randint(0, n // 3 + 1) if kind == "allocate" else rng.random()))
        return ops

    return draw


def _play(pool_cls: type, pages: bool = False) -> Callable[[list[Any], Trial], None]:
    """Apply the intents to the learner's pool and to a `BlockPool`; compare after each."""

    def play(ops: list[Any], trial: Trial) -> None:
        (n, per), name = ops[0], _name(pool_cls)
        args = f"{n}, 16" + (f", blocks_per_page={per}" if per else "")
        try:
            ref = BlockPool(n, 16, blocks_per_page=per)
        except InvalidArgument:  # pages that do not tile the pool: refuse, or count the last
            pool = trial.run(f"pool = {name}({args})", _refused_or_made, pool_cls, n, per)
            if pool is None:
                return
            ref = BlockPool(n, 16)
        else:
            page_args = {"blocks_per_page": per} if per else {}
            pool = trial.run(f"pool = {name}({args})", lambda: pool_cls(n, 16, **page_args))
        to_lib: dict[int, int] = {}  # the learner's id of each block in use -> the library's
        counted = hasattr(pool, "ref_count")
        for kind, arg in ops[1:]:
            rng = random.Random(arg)
            held = sorted(to_lib)
            if kind == "allocate":
                _allocate(trial, pool, ref, to_lib, arg, n)
            elif kind == "bad_id":
                bad = rng.choice([-1, n, n + 2])
                trial.same(
                    f"pool.ref_count({bad})",
                    lambda bad=bad: pool.ref_count(bad),
                    lambda bad=bad: ref.ref_count(bad),
                    why=f"{bad} is not a block id: ids are 0..{n - 1}",
                )
                continue
            elif kind in ("share", "release") and held:
                batch = [rng.choice(held) for _ in range(rng.randint(1, 3))]
                _batch_call(trial, pool, ref, to_lib, kind, batch)
            elif kind == "bad":
                bad = rng.choice([-1, n, n + 3, *(b for b in range(n) if b not in to_lib)])
                extra = [rng.choice(held)] if held and rng.random() < 0.5 else []
                _batch_call(
                    trial, pool, ref, to_lib, rng.choice(["share", "release"]), [*extra, bad]
                )
            else:
                continue
            _compare(trial, pool, ref, to_lib, n, per if pages else 0, counted)

    return play


def _refused_or_made(pool_cls: type, n: int, per: int) -> Any:
    try:
        return pool_cls(n, 16, blocks_per_page=per)
    except InvalidArgument:
        return None


def _allocate(
    trial: Trial, pool: Any, ref: BlockPool, to_lib: dict[int, int], k: int, n: int
) -> None:
    line = f"pool.allocate({k})"
    if k > ref.num_free:
        trial.same(
            line,
            lambda: pool.allocate(k),
            lambda: ref.allocate(k),
            why=f"{ref.num_free} blocks are free",
        )
        return
    got = trial.run(line, pool.allocate, k)
    ok = (
        isinstance(got, list)
        and len(got) == k
        and len(set(got)) == k
        and all(type(b) is int and 0 <= b < n and b not in to_lib for b in got)
    )
    if not ok:
        trial.fail(
            causes.WRONG_RESULT,
            "each id once, and only blocks that are free",
            line=line,
            want=f"{k} distinct free block ids in 0..{n - 1} (in use: {sorted(to_lib)})",
            got=got,
        )
    to_lib.update(zip(got, ref.allocate(k), strict=True))


def _batch_call(
    trial: Trial, pool: Any, ref: BlockPool, to_lib: dict[int, int], kind: str, batch: list[int]
) -> None:
    """`pool.share(batch)` or `pool.release(batch)`, beside the library's on the same blocks."""
    spare = [b for b in range(ref.num_blocks) if ref.ref_count(b) == 0]
    lib = [
        to_lib.get(b, b if not 0 <= b < ref.num_blocks else spare[0] if spare else b) for b in batch
    ]
    from_lib = {v: k for k, v in to_lib.items()}
    handed = trial.hand(batch)
    line = f"pool.{kind}({batch})"
    if kind == "share":
        trial.same(
            line,
            lambda: pool.share(handed),
            lambda: ref.share(lib),
            why="each id must be a block in use",
        )
        return
    trial.same(
        line,
        lambda: pool.release(handed),
        lambda: sorted(from_lib[b] for b in ref.release(lib)),
        why="an id outside the pool, or more releases than references (a double free)",
        compare=lambda got, want: (
            None if _sorted(got) == want else "return the blocks that reached 0, in any order"
        ),
    )
    for b in set(batch):
        if b in to_lib and ref.ref_count(to_lib[b]) == 0:
            del to_lib[b]


def _sorted(value: Any) -> Any:
    try:
        return sorted(value)
    except TypeError:
        return value


def _compare(
    trial: Trial,
    pool: Any,
    ref: BlockPool,
    to_lib: dict[int, int],
    n: int,
    per: int | None,
    counted: bool,
) -> None:
    for b in range(n) if counted else ():
        want = ref.ref_count(to_lib[b]) if b in to_lib else 0
        trial.expect(
            f"pool.ref_count({b})",
            trial.read(f"pool.ref_count({b})", lambda b=b: pool.ref_count(b)),
            want,
            "share adds a reference, release drops one",
        )
    trial.expect(
        "pool.num_free",
        trial.read("pool.num_free", lambda: pool.num_free),
        ref.num_free,
        "a block is free exactly when its reference count is 0: back on the free list",
    )
    if per != 0:  # 0: not checking pages; None: a pool without pages has none
        busy = {b // per for b in to_lib} if per else set()
        want = [p for p in range(-(-n // per)) if p not in busy] if per else []
        got = trial.read("pool.free_pages()", pool.free_pages)
        trial.expect(
            "pool.free_pages()",
            got,
            want,
            "a page is free when all its blocks are, a shorter last page included",
        )


@exercise(1, "allocate")
def check_allocate(pool_cls: type, *, seed: int = 0) -> None:
    """`pool_cls(num_blocks, block_size)` hands out distinct ids at ref count 1, all or nothing."""
    with stage("random trials on pools of up to 28 blocks"):
        search(
            _play(pool_cls),
            _draw(("allocate",), False),
            trials=60,
            seed=seed,
            what="check_allocate",
        )
    passed("distinct blocks, all or nothing, as BlockPool on 60 random trials")


@exercise(2, "share and release")
def check_release(pool_cls: type, *, seed: int = 0) -> None:
    """`share(ids)` adds a reference, `release(ids)` drops one and frees a block at zero; both
    refuse a bad batch whole (foreign or negative ids, free blocks, double frees)."""
    kinds = ("allocate", "share", "release", "release", "bad", "bad_id")
    with stage("random trials on pools of up to 28 blocks"):
        search(_play(pool_cls), _draw(kinds, False), trials=80, seed=seed, what="check_release")
    passed("references counted, bad batches refused, as BlockPool on 80 random trials")


@exercise(3, "free_pages")
def check_free_pages(pool_cls: type, *, seed: int = 0) -> None:
    """`free_pages()` lists the pages whose blocks are all free, in increasing order, in work
    linear in the pool."""
    with stage("random trials on pools of up to 27 blocks"):
        search(
            _play(pool_cls, pages=True),
            _draw(("allocate", "release"), True),
            trials=150,
            seed=seed,
            what="check_free_pages",
        )
    size = 2_000
    with stage(f"free_pages() on a {size:,}-block pool"):
        pool = call(
            f"pool = {_name(pool_cls)}({size}, 16, blocks_per_page=4)",
            pool_cls,
            size,
            16,
            blocks_per_page=4,
        )
        call(f"pool.allocate({size // 2})", pool.allocate, size // 2)
        cost, meter, lines = work_of(pool, lambda: call("pool.free_pages()", pool.free_pages))
    if cost > _PER_BLOCK * size + 100:
        raise CheckFailed(
            grew(
                "free_pages()",
                _PER_BLOCK,
                cost,
                (1, size),
                "block(s)",
                meter,
                lines.copy(),
                lines,
                "It may look at each block once, never search a list for each block: read "
                "the reference counts.",
            ),
            causes.WORK_GROWS,
        )
    passed("free pages right on 150 random pools, in work linear in the pool")


_PER_BLOCK = 10  # Python lines plus container entries touched, per block of the pool
_SIZES = (500, 20_000)  # half-full pools: lines and entries touched
_TIMED_SIZES = (1_000, 200_000)  # fresh pools: seconds, a backstop for work in C
_ADVICE = {
    "allocate": "Keep the free ids where one is taken without searching (a list as a stack).",
    "num_free": "num_free must not count: keep the free ids in a container whose len() says it.",
    "share": "A reference count per block, in a list indexed by block id, is all share needs.",
    "release": "Validate with the reference counts (one lookup per id), never by searching "
    "the free list; push freed ids onto its cheap end.",
}


def _constant(pool_cls: type, method: str) -> None:
    """10 calls of `method` on one block cost the same in a half-full pool of 500 and of
    20,000 blocks (lines and entries counted); then seconds on fresh pools, as a backstop."""
    name = _name(pool_cls)
    actions: dict[str, Callable[[Any, list[int]], Any]] = {
        "allocate": lambda pool, held: [pool.allocate(1) for _ in range(10)],
        "num_free": lambda pool, held: [pool.num_free for _ in range(10)],
        "share": lambda pool, held: [pool.share([b]) for b in held[:: len(held) // 10][:10]],
        "release": lambda pool, held: [pool.release([b]) for b in held[:: len(held) // 10][:10]],
    }
    fill: list[int] = []  # the costliest allocate(10) while filling the small pool

    def build(size: int) -> tuple[Any, list[int]]:
        """A half-full pool, filled 10 blocks at a time, each call counted: a scanning
        allocate fails as soon as it shows, before a quadratic fill of the large pool."""
        pool = call(f"pool = {name}({size}, 16)", pool_cls, size, 16)
        held: list[int] = []
        doing = f"pool.allocate(10) on a {size:,}-block pool"
        meter = Meter()
        instrument(pool, meter)
        for _ in range(size // 20):
            meter.reset()
            lines = count_lines_by_function(lambda: held.extend(call(doing, pool.allocate, 10)))[1]
            cost = sum(lines.values()) + meter.total
            if size == _SIZES[0]:
                fill.append(cost)
            elif cost > 2 * max(fill) + 50:
                where = (
                    ""
                    if method == "allocate"
                    else "this check fills its pools with your allocate (exercise 1's): "
                )
                message = grew(
                    "one pool.allocate(10)",
                    max(fill),
                    cost,
                    _SIZES,
                    "blocks",
                    meter,
                    Counter(),
                    lines,
                    _ADVICE["allocate"],
                )
                raise CheckFailed(where + message, causes.WORK_GROWS)
        return pool, held

    constant_work(
        build,
        lambda pool, held: call(f"10 calls of pool.{method}", actions[method], pool, held),
        _SIZES,
        what=f"10 calls of pool.{method}",
        unit="blocks in a half-full pool",
        hint=_ADVICE[method],
    )

    def fresh(size: int) -> tuple[Any, list[int]]:
        pool = pool_cls(size, 16)
        return pool, [] if method in ("allocate", "num_free") else pool.allocate(10)

    with stage(
        f"timing pool.{method} in pools of {_TIMED_SIZES[0]:,} and {_TIMED_SIZES[1]:,} blocks"
    ):
        ratio = grows_in_time(fresh, lambda state: actions[method](*state), _TIMED_SIZES)
    if ratio is not None:
        raise CheckFailed(
            f"pool.{method} took {ratio:,.0f}× longer in a {_TIMED_SIZES[1]:,}-block pool than "
            f"in a {_TIMED_SIZES[0]:,}-block one (the fastest of 3 rounds, measured twice): work "
            "that grows with the pool, in C where the counts cannot see it (a `range` or a new "
            f"set on each call?). {_ADVICE[method]}",
            causes.WORK_GROWS,
        )


@exercise(1, "allocate")
def check_constant_time_allocate(pool_cls: type) -> None:
    """`allocate` and `num_free` do the same work in a pool of 500 and of 20,000 blocks."""
    _constant(pool_cls, "allocate")
    _constant(pool_cls, "num_free")
    passed("the same work per allocate and num_free in pools of 500 and 20,000 blocks")


@exercise(2, "share and release")
def check_constant_time_release(pool_cls: type) -> None:
    """`share` and `release` of one block do the same work in a pool of 500 and of 20,000."""
    _constant(pool_cls, "share")
    _constant(pool_cls, "release")
    passed("the same work per share and release in pools of 500 and 20,000 blocks")
