"""Chapter 01 checks: a block pool (`BlockPool`'s core interface) allocates, shares, releases
and frees pages like `BlockPool`, in constant work per block. Random calls go to the learner's
pool and to a `BlockPool` alike, the library's ids mapped to those the learner's pool handed out.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial
from typing import Any

from paged_kv.cache.block_pool import BlockPool
from paged_kv.course.checks.cost import constant_work, grows_in_time
from paged_kv.course.checks.failures import call, exercise, passed, stage
from paged_kv.course.checks.harness import Mismatch, Trial, differential, intents, name_of, search
from paged_kv.errors import InvalidArgument


def _pool_size(pages: bool, rng: random.Random) -> tuple[int, int | None]:
    """Blocks and blocks per page (None: no pages; 0: pages not checked)."""
    per = rng.choice([None, 1, 2, 3, 4]) if pages else 0
    return rng.randint(1, 6) * (per or 4) + (rng.random() < 0.2) * rng.randint(1, 3), per


def _intent(kinds: tuple[str, ...], rng: random.Random, size: tuple[int, Any]) -> tuple:
    """("allocate", k) or (kind, the seed of its arguments, drawn when it runs)."""
    kind = rng.choice(kinds)
    return kind, rng.randint(0, size[0] // 3 + 1) if kind == "allocate" else rng.random()


def _start(pool_cls: type, size: tuple[int, Any], trial: Trial) -> tuple | None:
    """The learner's pool and a `BlockPool`, and the learner's id of each block in use mapped
    to the library's; None where the learner's pool rightly refuses pages that do not tile."""
    (n, per), tiles = size, not size[1] or size[0] % size[1] == 0  # else a shorter last page
    try:
        pool = _new_pool(pool_cls, n, per, trial.run)
    except Mismatch as failure:
        if tiles or not isinstance(failure.__cause__, InvalidArgument):
            raise
        return None
    return pool, BlockPool(n, 16, blocks_per_page=per if tiles and per else None), {}, per


def _new_pool(pool_cls: type, n: int, per: int | None, run: Callable[..., Any] = call) -> Any:
    """`pool_cls(n, 16)`, in pages of `per` if given, made by `run` (a trial's, or `call`)."""
    pages = {"blocks_per_page": per} if per else {}
    line = f"pool = {name_of(pool_cls, 'Pool')}({n}, 16{f', blocks_per_page={per}' * bool(per)})"
    return run(line, pool_cls, n, 16, **pages)


def _step(trial: Trial, state: tuple, op: tuple) -> list | None:
    (pool, ref, to_lib, per), (kind, arg) = state, op
    rng, held, n = random.Random(arg), sorted(to_lib), ref.num_blocks
    if kind == "allocate":
        _allocate(trial, pool, ref, to_lib, arg)
    elif kind == "bad_id":
        bad = rng.choice([-1, n, n + 2])
        why = f"{bad} is not a block id: ids are 0..{n - 1}"
        trial.call("pool", pool, ref, "ref_count", bad, why=why)
        return None
    elif kind in ("share", "release") and held:
        batch = [rng.choice(held) for _ in range(rng.randint(1, 3))]
        _batch_call(trial, pool, ref, to_lib, kind, batch)
    elif kind == "bad":
        bad = rng.choice([-1, n, n + 3, *(b for b in range(n) if b not in to_lib)])
        extra = [rng.choice(held)] if held and rng.random() < 0.5 else []
        _batch_call(trial, pool, ref, to_lib, rng.choice(["share", "release"]), [*extra, bad])
    else:
        return None
    return _reads(pool, ref, to_lib, per)


def _allocate(trial: Trial, pool: Any, ref: BlockPool, to_lib: dict[int, int], k: int) -> None:
    """`pool.allocate(k)`: refused as the library refuses, else any `k` distinct free ids."""
    n = ref.num_blocks

    def fresh(got: Any, want: list[int]) -> str | None:
        distinct = isinstance(got, list) and len(got) == len(set(got)) == k
        if distinct and all(type(b) is int and 0 <= b < n and b not in to_lib for b in got):
            return None
        return (
            f"any {k} distinct ids of free blocks (0..{n - 1}, less those in use: {sorted(to_lib)})"
        )

    why = f"{ref.num_free} blocks are free"
    got, want = trial.call("pool", pool, ref, "allocate", k, why=why, compare=fresh)
    if isinstance(want, list):
        to_lib.update(zip(got, want, strict=True))


def _batch_call(
    trial: Trial, pool: Any, ref: BlockPool, to_lib: dict[int, int], kind: str, batch: list[int]
) -> None:
    """`pool.share(batch)` or `pool.release(batch)`, beside the library's on the same blocks
    (a free block of the learner's is a free one of the library's)."""
    spare = [b for b in range(ref.num_blocks) if ref.ref_count(b) == 0] or [-1]
    lib = [to_lib.get(b, spare[0] if 0 <= b < ref.num_blocks else b) for b in batch]
    from_lib, release = {v: k for k, v in to_lib.items()}, kind == "release"

    def theirs() -> Any:
        return sorted(from_lib[b] for b in ref.release(lib)) if release else ref.share(lib)

    compare = _in_any_order if release else None
    trial.call("pool", pool, ref, kind, batch, theirs=theirs, why=_REFUSED[kind], compare=compare)
    for b in set(batch) & set(to_lib):
        if ref.ref_count(to_lib[b]) == 0:
            del to_lib[b]


_REFUSED = {
    "share": "each id must be a block in use",
    "release": "an id outside the pool, or more releases than references (a double free)",
}


def _in_any_order(got: Any, want: list[int]) -> str | None:
    try:
        same = want == sorted(got)
    except TypeError:
        same = False
    return None if same else "return the blocks that reached 0, in any order"


def _reads(pool: Any, ref: BlockPool, to_lib: dict[int, int], per: Any) -> list:
    """Every block's reference count, `num_free`, and (unless `per` is 0) `free_pages()`."""
    n, counted = ref.num_blocks, "share adds a reference, release drops one"
    refs = {b: ref.ref_count(lib) for b, lib in to_lib.items()}
    reads: list = [
        (f"pool.ref_count({b})", partial(pool.ref_count, b), refs.get(b, 0), counted)
        for b in range(n)
    ]
    free = "a block is free exactly when its reference count is 0: back on the free list"
    reads.append(("pool.num_free", lambda: pool.num_free, ref.num_free, free))
    if per != 0:  # None: a pool without pages has none
        busy = {b // per for b in to_lib} if per else set()
        want = [p for p in range(-(-n // per)) if p not in busy] if per else []
        hint = "a page is free when all its blocks are, a shorter last page included"
        reads.append(("pool.free_pages()", pool.free_pages, want, hint))
    return reads


def _trials(
    pool_cls: type, kinds: tuple[str, ...], trials: int, seed: int, what: str, pages: bool = False
) -> None:
    with stage(f"random trials on pools of up to {27 if pages else 28} blocks"):
        play = differential(partial(_start, pool_cls), _step)
        draw = intents(partial(_pool_size, pages), partial(_intent, kinds), 40)
        search(play, draw, trials=trials, seed=seed, what=what)


@exercise(1, "allocate")
def check_allocate(pool_cls: type, *, seed: int = 0) -> None:
    """`pool_cls(num_blocks, block_size)` hands out distinct ids at ref count 1, all or nothing."""
    _trials(pool_cls, ("allocate",), 60, seed, "check_allocate")
    passed("distinct blocks, all or nothing, as BlockPool on 60 random trials")


@exercise(2, "share and release")
def check_release(pool_cls: type, *, seed: int = 0) -> None:
    """`share(ids)` adds a reference, `release(ids)` drops one and frees a block at zero; both
    refuse a bad batch whole (foreign or negative ids, free blocks, double frees)."""
    kinds = ("allocate", "share", "release", "release", "bad", "bad_id")
    _trials(pool_cls, kinds, 80, seed, "check_release")
    passed("references counted, bad batches refused, as BlockPool on 80 random trials")


@exercise(3, "free_pages")
def check_free_pages(pool_cls: type, *, seed: int = 0) -> None:
    """`free_pages()` lists the pages whose blocks are all free, in increasing order, in work
    linear in the pool."""
    _trials(pool_cls, ("allocate", "release"), 150, seed, "check_free_pages", pages=True)
    constant_work(
        partial(_half_full, pool_cls, per=4),
        lambda pool, _: call("pool.free_pages()", pool.free_pages),
        (1_000, 2_000),
        what="free_pages()",
        unit="blocks in a half-full pool",
        hint="Twice the blocks may cost twice the work, not more: look at each block once, "
        "never search a list for each block (read the reference counts).",
    )
    passed("free pages right on 150 random pools, in work linear in the pool")


_SIZES = (200, 5_000)  # half-full pools: lines and entries touched
_TIMED_SIZES = (1_000, 200_000)  # half-full pools: seconds, a backstop for work in C
_ADVICE = {
    "allocate": "Keep the free ids where one is taken without searching (a list as a stack).",
    "num_free": "num_free must not count: keep the free ids in a container whose len() says it.",
    "share": "A reference count per block, in a list indexed by block id, is all share needs.",
    "release": "Validate with the reference counts (one lookup per id), never by searching "
    "the free list; push freed ids onto its cheap end.",
}
_ACTIONS: dict[str, Callable[[Any, list[int]], Any]] = {
    "allocate": lambda pool, held: [pool.allocate(1) for _ in range(10)],
    "num_free": lambda pool, held: [pool.num_free for _ in range(10)],
    "share": lambda pool, held: [pool.share([b]) for b in held[:: len(held) // 10][:10]],
    "release": lambda pool, held: [pool.release([b]) for b in held[:: len(held) // 10][:10]],
}


def _half_full(pool_cls: type, size: int, per: int | None = None) -> tuple[Any, list[int]]:
    """A pool of `size` blocks (in pages of `per`, if given), half of them allocated."""
    pool = _new_pool(pool_cls, size, per)
    return pool, call(f"pool.allocate({size // 2})", pool.allocate, size // 2)


def _constant(pool_cls: type, *methods: str) -> None:
    """10 calls of each method on one block do the same work (lines and entries counted) in
    half-full pools of 200 and 5,000 blocks, and take about the same time in half-full pools of
    1,000 and 200,000 blocks (a backstop for work in C)."""
    half_full = partial(_half_full, pool_cls)
    for method in methods:
        what, hint, work = f"10 calls of pool.{method}", _ADVICE[method], _ACTIONS[method]
        work = partial(call, what, work)
        unit = "blocks in a half-full pool"
        constant_work(half_full, work, _SIZES, what=what, unit=unit, hint=hint)
        timed = lambda state, w=work: w(*state)  # noqa: E731
        grows_in_time(half_full, timed, _TIMED_SIZES, what=what, unit=unit, hint=hint)


@exercise(1, "allocate")
def check_constant_time_allocate(pool_cls: type) -> None:
    """`allocate` and `num_free` do the same work in pools of 200 and of 5,000 blocks."""
    _constant(pool_cls, "allocate", "num_free")
    passed("the same work per allocate and num_free in pools of 200 and 5,000 blocks")


@exercise(2, "share and release")
def check_constant_time_release(pool_cls: type) -> None:
    """`share` and `release` of one block do the same work in pools of 200 and of 5,000."""
    _constant(pool_cls, "share", "release")
    passed("the same work per share and release in pools of 200 and 5,000 blocks")
