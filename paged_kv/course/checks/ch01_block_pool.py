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
from paged_kv.course.checks.cost import constant_work, grew, grows_in_time, work_of
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
        (n, per), to_lib = ops[0], {}  # the learner's id of each block in use -> the library's
        tiles = not per or n % per == 0  # pages that do not tile: refuse, or count the last
        kwargs = {"blocks_per_page": per} if per else {}
        ref = BlockPool(n, 16, **(kwargs if tiles else {}))
        pages_of = f", blocks_per_page={per}" if per else ""
        pool = trial.run(f"pool = {_name(pool_cls)}({n}, 16{pages_of})", _made, pool_cls, n, kwargs)
        if pool is None:
            return
        for kind, arg in ops[1:]:
            rng, held = random.Random(arg), sorted(to_lib)
            if kind == "allocate":
                _allocate(trial, pool, ref, to_lib, arg)
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
            _compare(trial, pool, ref, to_lib, per if pages else 0)

    return play


def _made(pool_cls: type, n: int, kwargs: dict[str, int]) -> Any:
    """The learner's pool, or None if it refuses its pages (right when they do not tile)."""
    try:
        return pool_cls(n, 16, **kwargs)
    except InvalidArgument:
        if not kwargs or n % kwargs["blocks_per_page"] == 0:
            raise
        return None


def _allocate(trial: Trial, pool: Any, ref: BlockPool, to_lib: dict[int, int], k: int) -> None:
    line, n = f"pool.allocate({k})", ref.num_blocks
    if k > ref.num_free:
        why = f"{ref.num_free} blocks are free"
        trial.same(line, lambda: pool.allocate(k), lambda: ref.allocate(k), why=why)
        return
    got = trial.run(line, pool.allocate, k)
    if not (
        isinstance(got, list)
        and len(got) == len(set(got)) == k
        and all(type(b) is int and 0 <= b < n and b not in to_lib for b in got)
    ):
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
    """`pool.share(batch)` or `pool.release(batch)`, beside the library's on the same blocks
    (a free block of the learner's is a free one of the library's)."""
    spare = [b for b in range(ref.num_blocks) if ref.ref_count(b) == 0] or [-1]
    lib = [to_lib.get(b, spare[0] if 0 <= b < ref.num_blocks else b) for b in batch]
    from_lib = {v: k for k, v in to_lib.items()}
    handed, line = trial.hand(batch), f"pool.{kind}({batch})"
    if kind == "share":
        why = "each id must be a block in use"
        trial.same(line, lambda: pool.share(handed), lambda: ref.share(lib), why=why)
        return
    trial.same(
        line,
        lambda: pool.release(handed),
        lambda: sorted(from_lib[b] for b in ref.release(lib)),
        why="an id outside the pool, or more releases than references (a double free)",
        compare=_in_any_order,
    )
    for b in set(batch) & set(to_lib):
        if ref.ref_count(to_lib[b]) == 0:
            del to_lib[b]


def _in_any_order(got: Any, want: list[int]) -> str | None:
    try:
        same = sorted(got) == want
    except TypeError:
        same = False
    return None if same else "return the blocks that reached 0, in any order"


def _compare(trial: Trial, pool: Any, ref: BlockPool, to_lib: dict[int, int], per: Any) -> None:
    """Every block's reference count, `num_free`, and (unless `per` is 0) `free_pages()`."""
    n = ref.num_blocks
    for b in range(n):
        expr = f"pool.ref_count({b})"
        want = ref.ref_count(to_lib[b]) if b in to_lib else 0
        got = trial.read(expr, lambda b=b: pool.ref_count(b))
        trial.expect(expr, got, want, "share adds a reference, release drops one")
    hint = "a block is free exactly when its reference count is 0: back on the free list"
    trial.expect(
        "pool.num_free", trial.read("pool.num_free", lambda: pool.num_free), ref.num_free, hint
    )
    if per != 0:  # 0: not checking pages; None: a pool without pages has none
        busy = {b // per for b in to_lib} if per else set()
        want = [p for p in range(-(-n // per)) if p not in busy] if per else []
        got = trial.read("pool.free_pages()", pool.free_pages)
        hint = "a page is free when all its blocks are, a shorter last page included"
        trial.expect("pool.free_pages()", got, want, hint)


@exercise(1, "allocate")
def check_allocate(pool_cls: type, *, seed: int = 0) -> None:
    """`pool_cls(num_blocks, block_size)` hands out distinct ids at ref count 1, all or nothing."""
    with stage("random trials on pools of up to 28 blocks"):
        play, draw = _play(pool_cls), _draw(("allocate",), False)
        search(play, draw, trials=60, seed=seed, what="check_allocate")
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
        play, draw = _play(pool_cls, pages=True), _draw(("allocate", "release"), True)
        search(play, draw, trials=150, seed=seed, what="check_free_pages")
    size = 2_000
    with stage(f"free_pages() on a {size:,}-block pool"):
        made = f"pool = {_name(pool_cls)}({size}, 16, blocks_per_page=4)"
        pool = call(made, pool_cls, size, 16, blocks_per_page=4)
        call(f"pool.allocate({size // 2})", pool.allocate, size // 2)
        cost, meter, lines = work_of(pool, lambda: call("pool.free_pages()", pool.free_pages))
    if cost > _PER_BLOCK * size + 100:
        hint = (
            "It may look at each block once, never search a list for each block: read the "
            "reference counts."
        )
        sizes, unit = (1, size), "block(s)"
        message = grew("free_pages()", _PER_BLOCK, cost, sizes, unit, meter, Counter(), lines, hint)
        raise CheckFailed(message, causes.WORK_GROWS)
    passed("free pages right on 150 random pools, in work linear in the pool")


_PER_BLOCK = 10  # Python lines plus container entries touched, per block of the pool
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


def _constant(pool_cls: type, method: str) -> None:
    """10 calls of `method` on one block do the same work (lines and entries counted) in
    half-full pools of 200 and 5,000 blocks, and take about the same time in half-full pools of
    1,000 and 200,000 blocks (a backstop for work in C)."""
    what, hint = f"10 calls of pool.{method}", _ADVICE[method]

    def half_full(size: int) -> tuple[Any, list[int]]:
        pool = call(f"pool = {_name(pool_cls)}({size}, 16)", pool_cls, size, 16)
        return pool, call(f"pool.allocate({size // 2})", pool.allocate, size // 2)

    def work(pool: Any, held: list[int]) -> Any:
        return call(what, _ACTIONS[method], pool, held)

    constant_work(half_full, work, _SIZES, what=what, unit="blocks in a half-full pool", hint=hint)
    small, large = _TIMED_SIZES
    with stage(f"timing pool.{method} in pools of {small:,} and {large:,} blocks"):
        ratio = grows_in_time(half_full, lambda state: work(*state), _TIMED_SIZES)
    if ratio is not None:
        raise CheckFailed(
            f"pool.{method} took {ratio:,.0f}× longer in a {large:,}-block pool than in a "
            f"{small:,}-block one (the fastest of 3 rounds, measured twice): work that grows "
            "with the pool, in C where the counts cannot see it (a `range` or a new set on each "
            f"call?). {hint}",
            causes.WORK_GROWS,
        )


@exercise(1, "allocate")
def check_constant_time_allocate(pool_cls: type) -> None:
    """`allocate` and `num_free` do the same work in pools of 200 and of 5,000 blocks."""
    _constant(pool_cls, "allocate")
    _constant(pool_cls, "num_free")
    passed("the same work per allocate and num_free in pools of 200 and 5,000 blocks")


@exercise(2, "share and release")
def check_constant_time_release(pool_cls: type) -> None:
    """`share` and `release` of one block do the same work in pools of 200 and of 5,000."""
    _constant(pool_cls, "share")
    _constant(pool_cls, "release")
    passed("the same work per share and release in pools of 200 and 5,000 blocks")
