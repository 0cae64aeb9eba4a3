"""The pool under test beside a `BlockPool`: what chapter 01's checks expect of each call
(a value read, fresh ids, reference counts, `OutOfBlocks`' fields, `release`'s return), and
random runs of allocate / share / release compared with the library's pool after every call.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from paged_kv.cache.block_pool import BlockPool
from paged_kv.course.checks.failures import _label
from paged_kv.course.checks.replay import Replay
from paged_kv.errors import InvalidBlock, OutOfBlocks


def pool_name(pool_cls: Any) -> str:
    func = getattr(pool_cls, "func", pool_cls)  # a functools.partial names its function
    return getattr(func, "__name__", "Pool")


def expect_read(r: Replay, line: str, get: Callable[[], Any], want: Any, why: str) -> None:
    got = r.read(line, get)
    if isinstance(want, list) and got != want and _sorted(got) == want:
        why = (
            "in increasing order" if isinstance(got, list) else "return a list, in increasing order"
        )
    if got != want:
        r.fail(f"{line}: {got!r}", f"`{line}` should be {want!r} ({why}), got {got!r}")


def _sorted(value: Any) -> Any:
    try:
        return sorted(value)
    except TypeError:
        return value


def expect_fresh_ids(r: Replay, ids: Any, n: int, size: int, in_use: set[int], what: str) -> None:
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


def expect_refs(r: Replay, pool: Any, ids: list[int], want: int, why: str) -> None:
    if not hasattr(pool, "ref_count") and _label.get() == "Exercise 1 (allocate)":
        return  # exercise 1 does not need ref_count yet (the lecture's tiny pool has none)
    refs = [r.read(f"pool.ref_count({b})", pool.ref_count, b) for b in ids]
    if any(ref != want for ref in refs):
        r.fail(
            "ref counts",
            f"the reference counts of blocks {ids} are {refs}; expected {want} each ({why})",
        )


def expect_out_of_blocks(
    r: Replay, pool: Any, line: str, action: Callable[[], Any], requested: int, available: int
) -> None:
    """`action` must raise OutOfBlocks having taken nothing (`available` blocks were free before
    it, and still are), with the fields requested=`requested`, available=`available`."""
    err = r.raises(OutOfBlocks, line, action)
    left = r.read("pool.num_free", lambda: pool.num_free)
    if left != available:
        r.fail(
            "refused allocate took blocks",
            f"`{line}` raised OutOfBlocks but took blocks first: num_free was {available} "
            f"before the call and is {left} after it. A refused allocate must change nothing "
            "(all or nothing): compare n with the free count before taking the first block",
        )
    if (err.requested, err.available) != (requested, available):
        r.fail(
            "OutOfBlocks fields",
            f"`{line}` raised OutOfBlocks(requested={err.requested}, available="
            f"{err.available}); it should say requested={requested}, available={available} "
            "(available: the blocks that are free now, so the caller knows how short it is)",
        )


def run_batch(r: Replay, line: str, fn: Callable[[list[int]], Any], batch: list[int]) -> Any:
    """`fn(copy of batch)`, recorded as `line`; the call must leave the list as it was given."""
    given = list(batch)
    result = r.run(line, fn, given)
    expect_batch_kept(r, line, batch, given)
    return result


def raises_batch(
    r: Replay,
    error: type[Exception],
    line: str,
    fn: Callable[..., Any],
    batch: list[int],
    why: str = "",
) -> Exception:
    """`fn(copy of batch)` must raise `error`, leaving the list as it was given."""
    given = list(batch)
    err = r.raises(error, line, fn, given, why=why)
    expect_batch_kept(r, line, batch, given)
    return err


def expect_batch_kept(r: Replay, line: str, batch: list[int], given: list[int]) -> None:
    if given != batch:
        r.fail(
            "changed the ids given",
            f"`{line}` changed the list of ids it was given (it was {batch}, it is {given} "
            "after the call): the list is the caller's (a block table it keeps using); read "
            "it, never sort, clear or change it",
        )


def not_an_id(block_id: Any, num_blocks: int) -> str:
    """Why `block_id` is refused, in words."""
    return f"{block_id} is not a block id: ids are 0..{num_blocks - 1}" + (
        "; Python's list[-1] would quietly read the last block" if block_id < 0 else ""
    )


def pool_ops(*, with_release: bool) -> Callable[[random.Random], list[Any]]:
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


def run_pool_ops(pool_cls: type, *, with_release: bool) -> Callable[[list[Any], Replay], None]:
    """Apply the intents to the learner's pool and to a `BlockPool`; compare after each."""

    def run(ops: list[Any], r: Replay) -> None:
        n = ops[0]
        pool = r.run(f"pool = {pool_name(pool_cls)}({n}, 16)", pool_cls, n, 16)
        ours = BlockPool(n, 16)
        mine_to_ours: dict[int, int] = {}  # learner's id -> library id, while in use
        for kind, arg in ops[1:]:
            rng = random.Random(arg) if isinstance(arg, float) else None
            held = sorted(mine_to_ours)
            if kind == "allocate":
                k = arg
                line = f"pool.allocate({k})"
                if k > ours.num_free:
                    expect_out_of_blocks(
                        r, pool, line, lambda k=k: pool.allocate(k), k, ours.num_free
                    )
                else:
                    got = r.run(line, pool.allocate, k)
                    expect_fresh_ids(r, got, k, n, set(held), line)
                    for mine, lib in zip(got, ours.allocate(k), strict=True):
                        mine_to_ours[mine] = lib
            elif kind in ("share", "release") and held and rng is not None:
                batch = [rng.choice(held) for _ in range(rng.randint(1, 3))]
                lib = [mine_to_ours[b] for b in batch]
                if kind == "share":
                    run_batch(r, f"pool.share({batch})", pool.share, batch)
                    ours.share(lib)
                elif all(batch.count(b) <= ours.ref_count(mine_to_ours[b]) for b in set(batch)):
                    freed = run_batch(r, f"pool.release({batch})", pool.release, batch)
                    lib_freed = ours.release(lib)
                    want = sorted(b for b in set(batch) if mine_to_ours[b] in lib_freed)
                    for b in want:
                        del mine_to_ours[b]
                    _compare_state(r, pool, ours, mine_to_ours, n)
                    expect_freed(r, batch, freed, want)
                else:
                    twice = next(
                        b for b in batch if batch.count(b) > ours.ref_count(mine_to_ours[b])
                    )
                    raises_batch(
                        r,
                        InvalidBlock,
                        f"pool.release({batch})",
                        pool.release,
                        batch,
                        why=f"block {twice} is released more often than it is referenced: "
                        "a double free",
                    )
            elif kind == "bad" and rng is not None:
                free = [b for b in range(n) if b not in mine_to_ours]
                choices = [-1, n, n + 3]
                if free:
                    choices += [rng.choice(free)]
                bad = rng.choice(choices)
                action = rng.choice(["share", "release"])
                extra = [rng.choice(held)] if held and rng.random() < 0.5 else []
                batch = [*extra, bad]
                why = (
                    not_an_id(bad, n)
                    if not 0 <= bad < n
                    else f"block {bad} is free: it has no reference to "
                    + ("share" if action == "share" else "release")
                )
                raises_batch(
                    r, InvalidBlock, f"pool.{action}({batch})", getattr(pool, action), batch, why
                )
            else:
                continue
            _compare_state(r, pool, ours, mine_to_ours, n)

    return run


def expect_freed(r: Replay, batch: list[int], freed: Any, want: list[int]) -> None:
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
