"""Checks for the exercises: the library's own scenarios, run against the learner's code.

Each `check_*` runs fixed scenarios, then random operations compared with a reference, and
raises `CheckFailed` with a message that says what was expected and what happened.
The test suite runs the same checks on the library, so both meet one standard.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

from paged_kv.block_pool import BlockPool
from paged_kv.block_table import blocks_needed as reference_blocks_needed
from paged_kv.block_table import slot_mapping as reference_slot_mapping
from paged_kv.engine import Engine
from paged_kv.errors import InvalidBlock, OutOfBlocks
from paged_kv.manager import KVCacheManager
from paged_kv.model import ModelConfig, TinyLM, greedy_dense
from paged_kv.scheduler import (
    Preemption,
    Request,
    RequestStatus,
    SamplingParams,
    Scheduler,
    StepPlan,
)


class CheckFailed(AssertionError):
    """The learner's code did something the chapter's rules forbid; the message says what."""


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def _passed(what: str) -> None:
    print(f"✅ {what}: all checks passed")


def _expect_raises(error: type[Exception], action: Callable[[], Any], what: str) -> None:
    try:
        action()
    except error:
        return
    except NotImplementedError:
        raise
    except Exception as exc:  # the wrong error type is a learner mistake worth naming
        raise CheckFailed(f"{what} should raise {error.__name__}, but raised {exc!r}.") from exc
    raise CheckFailed(f"{what} should raise {error.__name__}, but returned normally.")


# -- chapter 01: the block pool ----------------------------------------------------------


def check_allocate(pool_cls: type, *, seed: int = 0) -> None:
    """`pool_cls(num_blocks, block_size)` hands out distinct ids, all or nothing."""
    pool = pool_cls(8, 16)
    _expect(
        pool.num_free == 8, f"a new pool of 8 blocks should have 8 free, it says {pool.num_free}."
    )
    ids = pool.allocate(3)
    _expect(len(ids) == 3, f"allocate(3) returned {len(ids)} ids: {ids}.")
    _expect(len(set(ids)) == 3, f"allocate(3) returned the same block twice: {ids}.")
    _expect(all(0 <= b < 8 for b in ids), f"allocate(3) returned ids outside 0..7: {ids}.")
    _expect(
        pool.num_free == 5, f"after allocate(3) of 8, num_free should be 5, not {pool.num_free}."
    )
    _expect(pool.allocate(0) == [], "allocate(0) should return [] and allocate nothing.")
    _expect_raises(OutOfBlocks, lambda: pool.allocate(6), "allocate(6) with 5 free blocks")
    _expect(
        pool.num_free == 5,
        f"a failed allocate(6) must change nothing, but num_free went from 5 to {pool.num_free} "
        "(check the free count before taking any block).",
    )
    rest = pool.allocate(5)
    _expect(
        sorted(ids + rest) == list(range(8)),
        f"allocating all 8 blocks gave {sorted(ids + rest)}: every id 0..7 exactly once.",
    )
    _expect_raises(OutOfBlocks, lambda: pool.allocate(1), "allocate(1) on a full pool")
    _random_differential(pool_cls, seed, use_release=False)
    _passed("allocate")


def check_release(pool_cls: type, *, seed: int = 0) -> None:
    """`release(ids)` frees blocks for reuse and refuses double frees and foreign ids."""
    pool = pool_cls(4, 16)
    a, b = pool.allocate(2)
    pool.release([a])
    _expect(
        pool.num_free == 3,
        f"after releasing 1 of 2 allocated blocks num_free should be 3, not {pool.num_free}.",
    )
    _expect_raises(InvalidBlock, lambda: pool.release([a]), f"releasing block {a} twice")
    _expect(pool.num_free == 3, "a refused double free must not change num_free.")
    _expect_raises(
        InvalidBlock, lambda: pool.release([b, b]), f"release([{b}, {b}]) (one reference)"
    )
    _expect(pool.num_free == 3, "a refused release must release nothing, not even the first id.")
    _expect_raises(InvalidBlock, lambda: pool.release([99]), "releasing block 99 of a 4-block pool")
    pool.release([b])
    _expect(
        sorted(pool.allocate(4)) == [0, 1, 2, 3],
        "after releasing everything, allocate(4) should hand out all four blocks again.",
    )
    _random_differential(pool_cls, seed, use_release=True)
    _passed("release")


def check_free_pages(pool_cls: type, *, seed: int = 0) -> None:
    """`free_pages()` lists the pages whose blocks are all free, in increasing order."""
    pool = pool_cls(8, 16, blocks_per_page=4)
    _expect(
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
        _expect(
            got == expected,
            f"trial {trial}: {num_pages} pages of {per_page} blocks, blocks in use on pages "
            f"{busy}: free_pages() should be {expected}, got {got}.",
        )
    _passed("free_pages")


def check_constant_time_allocate(pool_cls: type) -> None:
    """`allocate(1)` does the same amount of Python work in a pool of 10³ and of 10⁵ blocks.

    Counts executed Python lines (not seconds), so the verdict does not depend on the machine.
    """
    work = {}
    for size in (1_000, 100_000):
        pool = pool_cls(size, 16)
        pool.allocate(size // 2)  # a half-full pool: the free blocks are not at the front
        work[size] = count_lines_executed(lambda p=pool: [p.allocate(1) for _ in range(10)])
    _expect(
        work[100_000] <= 2 * work[1_000] + 20,
        f"allocate(1) ran {work[1_000]} Python lines in a 1,000-block pool but {work[100_000]} "
        "in a 100,000-block pool: it scans the pool. Keep the free ids in a structure you can "
        "pop from without searching (a list used as a stack, or a deque).",
    )
    _passed("constant-time allocate")


def count_lines_executed(fn: Callable[[], Any]) -> int:
    """How many Python source lines `fn()` executes (C built-ins count as one line)."""
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(previous)
    return count


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
                    _expect_raises(
                        OutOfBlocks,
                        lambda t=theirs, k=k: t.allocate(k),
                        f"after {log[:-1][-6:]}, allocate({k}) with {ours.num_free} free",
                    )
                else:
                    got = theirs.allocate(k)
                    ours.allocate(k)
                    _expect(
                        len(got) == k and not set(got) & set(held) and all(0 <= b < n for b in got),
                        f"after {log[:-1][-6:]} on a {n}-block pool, allocate({k}) returned {got}, "
                        f"but blocks {sorted(held)} are still in use.",
                    )
                    held += got
            _expect(
                theirs.num_free == ours.num_free,
                f"after {log[-6:]} on a {n}-block pool, num_free should be {ours.num_free}, "
                f"got {theirs.num_free}.",
            )


def _in_use(pool: BlockPool) -> list[int]:
    return [b for b in range(pool.num_blocks) if pool.ref_count(b)]


# -- chapter 02: block tables --------------------------------------------------------------


def check_blocks_needed(fn: Callable[[int, int], int]) -> None:
    """`fn(num_tokens, block_size)` is the number of blocks that hold `num_tokens` tokens."""
    for tokens, size, want in [(0, 16, 0), (1, 16, 1), (16, 16, 1), (17, 16, 2), (33, 1, 33)]:
        got = fn(tokens, size)
        _expect(got == want, f"blocks_needed({tokens}, {size}) should be {want}, got {got}.")
    rng = random.Random(0)
    for _ in range(1000):
        tokens, size = rng.randint(0, 10_000), rng.randint(1, 64)
        want = reference_blocks_needed(tokens, size)
        got = fn(tokens, size)
        _expect(got == want, f"blocks_needed({tokens}, {size}) should be {want}, got {got}.")
    _passed("blocks_needed")


def check_slot_mapping(fn: Callable[[Sequence[int], int, int, int], list[int]]) -> None:
    """`fn(block_table, block_size, start, end)` gives the slots of tokens start..end-1."""
    got = fn([7, 2], 4, 0, 6)
    _expect(
        list(got) == [28, 29, 30, 31, 8, 9],
        "with block table [7, 2] and block_size 4, tokens 0..5 live in slots "
        f"[28, 29, 30, 31, 8, 9] (block 7 holds tokens 0-3, block 2 holds 4-5); got {list(got)}.",
    )
    rng = random.Random(0)
    for _ in range(500):
        size = rng.randint(1, 16)
        table = rng.sample(range(64), rng.randint(1, 8))
        start = rng.randint(0, len(table) * size)
        end = rng.randint(start, len(table) * size)
        want = reference_slot_mapping(table, size, start, end)
        got = list(fn(table, size, start, end))
        _expect(
            got == want,
            f"slot_mapping({table}, {size}, {start}, {end}) should be {want}, got {got}.",
        )
    _passed("slot_mapping")


def check_grow_block_table(fn: Callable[[BlockPool, list[int], int, int], list[int]]) -> None:
    """`fn(pool, table, num_tokens, num_new)` adds blocks only when needed, all or nothing."""
    pool = BlockPool(4, 4)
    table: list[int] = []
    new = fn(pool, table, 0, 5)
    _expect(
        len(table) == 2 and new == table,
        f"5 tokens in blocks of 4 need 2 blocks; table is {table}, returned {new}.",
    )
    new = fn(pool, table, 5, 3)
    _expect(
        new == [] and len(table) == 2,
        f"tokens 6-8 still fit in the second block; nothing should be allocated, got {new}.",
    )
    new = fn(pool, table, 8, 1)
    _expect(len(new) == 1 and len(table) == 3, f"token 9 starts a third block; table is {table}.")
    before = list(table)
    _expect_raises(
        OutOfBlocks, lambda: fn(pool, table, 9, 8), "growing by 8 tokens with 1 free block"
    )
    _expect(
        table == before and pool.num_free == 1,
        f"a failed grow must leave the table ({before}) and the pool (1 free) as they were; "
        f"now the table is {table} and {pool.num_free} free. Allocate first, then extend.",
    )
    rng = random.Random(0)
    for _ in range(100):
        size = rng.randint(1, 8)
        pool = BlockPool(rng.randint(1, 12), size)
        table, tokens = [], 0
        for _ in range(20):
            extra = rng.randint(0, 2 * size)
            fits = reference_blocks_needed(tokens + extra, size) - len(table) <= pool.num_free
            if not fits:
                _expect_raises(
                    OutOfBlocks,
                    lambda t=table, n=tokens, e=extra, p=pool: fn(p, t, n, e),
                    f"growing a {tokens}-token table by {extra} with {pool.num_free} free",
                )
                continue
            fn(pool, table, tokens, extra)
            tokens += extra
            _expect(
                len(table) == reference_blocks_needed(tokens, size),
                f"{tokens} tokens with block_size {size} need "
                f"{reference_blocks_needed(tokens, size)} blocks; the table has {len(table)}.",
            )
    _passed("grow_block_table")


# -- chapter 03: eviction ------------------------------------------------------------------


def _policy_ops(rng: random.Random, num_blocks: int, length: int) -> list[tuple[str, int]]:
    kinds = ["touch", "touch", "evictable", "revive", "forget", "evict"]
    return [(rng.choice(kinds), rng.randrange(num_blocks)) for _ in range(length)]


def _compare_policies(theirs: Any, ours: Any, ops: list[tuple[str, int]], what: str) -> None:
    """Apply the same legal operations to both; every victim and size must agree."""
    candidates: set[int] = set()
    log: list[str] = []
    for op, b in ops:
        if op == "touch":
            theirs.touch(b)
            ours.touch(b)
        elif op == "evictable" and b not in candidates:
            theirs.make_evictable(b)
            ours.make_evictable(b)
            candidates.add(b)
        elif op == "revive" and b in candidates:
            theirs.revive(b)
            ours.revive(b)
            candidates.discard(b)
        elif op == "forget":
            theirs.forget(b)
            ours.forget(b)
            candidates.discard(b)
        elif op == "evict" and candidates:
            want, got = ours.evict(), theirs.evict()
            log.append(f"evict()→{got}")
            _expect(
                got == want,
                f"{what}: after {' '.join(log[-8:-1])} ... evict() should return block {want}, "
                f"got {got}.",
            )
            candidates.discard(want)
            continue
        else:
            continue
        log.append(f"{op}({b})")
        _expect(
            len(theirs) == len(candidates),
            f"{what}: after {' '.join(log[-8:])}, len() should be {len(candidates)} evictable "
            f"blocks, got {len(theirs)}.",
        )


def check_lfu(lfu_cls: type) -> None:
    """`lfu_cls()` evicts like `paged_kv.eviction.LFU`, in O(1) work with bounded structures."""
    from paged_kv.eviction import LFU

    policy = lfu_cls()
    for b in (1, 2, 3):
        policy.touch(b)
        policy.make_evictable(b)
    policy.touch(1)
    policy.touch(3)
    _expect(
        policy.evict() == 2,
        "blocks 1, 2, 3 touched once, then 1 and 3 touched again: block 2 has the lowest "
        "count and must be evicted first.",
    )
    _expect(
        policy.evict() == 1,
        "blocks 1 and 3 both have count 2: the tie goes to the least recently touched, block 1.",
    )
    rng = random.Random(0)
    for trial in range(300):
        _compare_policies(lfu_cls(), LFU(), _policy_ops(rng, 8, 60), f"random trial {trial}")
    _check_constant_work(lfu_cls)
    _passed("LFU")


def check_aging(aging_cls: type) -> None:
    """`aging_cls(window=w)` evicts like `paged_kv.eviction.AgingLFU(window=w)`."""
    from paged_kv.eviction import AgingLFU

    policy = aging_cls(window=2)
    policy.touch(1)
    policy.touch(1)
    policy.touch(2)  # the first touch of block 1 leaves the window
    _expect(
        policy.count(1) == 1,
        "with window=2, after touches 1, 1, 2 only the last two count: block 1 should have "
        f"count 1, it has {policy.count(1)}.",
    )
    rng = random.Random(1)
    for trial in range(300):
        window = rng.randint(1, 6)
        _compare_policies(
            aging_cls(window=window), AgingLFU(window=window), _policy_ops(rng, 8, 60),
            f"random trial {trial} (window={window})",
        )  # fmt: skip
    _check_constant_work(aging_cls)
    _passed("LFU with aging")


def check_policy_contract(policy_cls: type) -> None:
    """`policy_cls()` keeps the interface's promises: victims are evictable blocks, sizes add up."""
    rng = random.Random(2)
    for trial in range(200):
        policy, candidates = policy_cls(), set()
        for op, b in _policy_ops(rng, 10, 80):
            if op == "touch":
                policy.touch(b)
            elif op == "evictable" and b not in candidates:
                policy.make_evictable(b)
                candidates.add(b)
            elif op == "revive" and b in candidates:
                policy.revive(b)
                candidates.discard(b)
            elif op == "forget":
                policy.forget(b)
                candidates.discard(b)
            elif op == "evict" and candidates:
                victim = policy.evict()
                _expect(
                    victim in candidates,
                    f"trial {trial}: evict() returned {victim}, which is not evictable "
                    f"(evictable: {sorted(candidates)}). Never evict a block in use.",
                )
                candidates.discard(victim)
            _expect(
                len(policy) == len(candidates)
                and all((x in policy) == (x in candidates) for x in range(10)),
                f"trial {trial}: len() and `in` must describe exactly the evictable blocks "
                f"{sorted(candidates)}.",
            )
    _passed("policy contract")


def _check_constant_work(policy_cls: type) -> None:
    """Python lines per operation and container sizes must not grow with the cache."""
    lines, sizes = {}, {}
    for n in (200, 20_000):
        policy = policy_cls()
        for b in range(n):
            policy.touch(b)
            policy.make_evictable(b)
            for _ in range(b % 50):  # hits on a cached block: many different counts
                policy.touch(b)
        for b in range(n, 2 * n):  # churn: the structures must not keep garbage
            policy.evict()
            policy.touch(b)
            policy.make_evictable(b)

        def work(p=policy, n=n):
            for b in range(2 * n, 2 * n + 50):
                p.touch(b % n + n)  # hits on cached blocks
                p.evict()
                p.touch(b)
                p.make_evictable(b)

        lines[n] = count_lines_executed(work)
        sizes[n] = _container_sizes(policy)
    _expect(
        lines[20_000] <= 2 * lines[200] + 50,
        f"50 hit/evict/insert rounds ran {lines[200]} Python lines with 200 cached blocks but "
        f"{lines[20_000]} with 20,000: something scans. Keep the candidates in buckets by count "
        "and find the lowest non-empty bucket without looping over blocks.",
    )
    _expect(
        sizes[20_000] <= 12 * 20_000,
        f"your structures hold {sizes[20_000]} entries for 20,000 cached blocks: garbage is "
        "piling up (a heap with lazy deletion grows with every touch). Remove entries when "
        "a block moves or leaves.",
    )


def _container_sizes(obj: Any) -> int:
    """Total length of the containers an object holds in its attributes (one level deep)."""
    total = 0
    for value in vars(obj).values():
        if isinstance(value, list | dict | set | tuple) or hasattr(value, "__len__"):
            try:
                total += len(value)
                if isinstance(value, list | tuple) and value and hasattr(value[0], "__len__"):
                    total += sum(len(v) for v in value)
            except TypeError:
                pass
    return total


# -- chapter 04: prefix caching --------------------------------------------------------------


def check_chained_hash(fn: Callable[..., list[bytes]]) -> None:
    """`fn(token_ids, block_size, salt=None)` returns one stable hash per full block, chained."""
    h = fn(list(range(10)), 4)
    _expect(
        len(h) == 2,
        f"10 tokens in blocks of 4 make 2 full blocks (a partial block has no hash); got {len(h)}.",
    )
    _expect(
        all(isinstance(x, bytes) and len(x) >= 16 for x in h),
        "each hash should be bytes of at least 16 (use hashlib, not hash()).",
    )
    _expect(fn(list(range(10)), 4) == h, "hashing the same tokens twice must give the same hashes.")
    same_blocks = fn([1, 2, 3, 4, 1, 2, 3, 4], 4)
    _expect(
        same_blocks[0] != same_blocks[1],
        "blocks [1, 2, 3, 4] then [1, 2, 3, 4]: the second hash must differ from the first, "
        "because it must also name everything before it (chain the parent's hash in).",
    )
    _expect(
        fn([9, 2, 3, 4, 5, 6, 7, 8], 4)[1] != fn([1, 2, 3, 4, 5, 6, 7, 8], 4)[1],
        "two prompts whose second blocks match but whose first blocks differ must get different "
        "second hashes: a hit on block 2 alone would splice KV computed after other tokens.",
    )
    _expect(
        fn([1, 2, 3, 4, 5, 6, 7, 8], 4)[:1] == fn([1, 2, 3, 4, 0, 0, 0, 0], 4)[:1],
        "prompts sharing their first block must share its hash.",
    )
    salted = fn(list(range(8)), 4, salt="tenant-a")
    _expect(
        salted[0] != fn(list(range(8)), 4)[0] and salted[1] != fn(list(range(8)), 4)[1],
        "a salt must change every hash of the chain (mix it into the first block's hash).",
    )
    _expect(
        salted == fn(list(range(8)), 4, salt="tenant-a"), "the same salt must give the same hashes."
    )
    rng = random.Random(0)
    seen: dict[bytes, tuple] = {}
    for _ in range(300):
        tokens = [rng.randrange(4) for _ in range(rng.randint(1, 12))]
        for i, digest in enumerate(fn(tokens, 2)):
            prefix = tuple(tokens[: (i + 1) * 2])
            _expect(
                seen.setdefault(digest, prefix) == prefix,
                f"prefixes {seen[digest]} and {prefix} got the same hash: a collision.",
            )
    _passed("chained hash")


def check_share_cached_prefix(fn: Callable[..., list[int]]) -> None:
    """`fn(pool, cache, hashes, num_prompt_tokens)` shares the longest cached run of `hashes`.

    It never covers the last prompt token and takes one reference on each block it returns.
    """
    from paged_kv.hashing import block_hashes
    from paged_kv.prefix_cache import PrefixCache

    rng = random.Random(0)
    for trial in range(300):
        size = rng.randint(1, 4)
        pool, cache = BlockPool(32, size), PrefixCache()
        cached_tokens = [rng.randrange(3) for _ in range(rng.randint(0, 5 * size))]
        cached = block_hashes(cached_tokens, size)
        blocks = pool.allocate(len(cached))
        for block, h in zip(blocks, cached, strict=True):
            cache.register(block, h)
        pool.keep_content(blocks)
        if rng.random() < 0.5:
            pool.release(blocks)  # cached, not in use: a hit revives them
        prompt = [rng.randrange(3) for _ in range(rng.randint(1, 6 * size))]
        hashes = block_hashes(prompt, size)
        refs = [pool.ref_count(b) for b in blocks]
        want = cache.longest_prefix(hashes[: (len(prompt) - 1) // size])
        got = list(fn(pool, cache, hashes, len(prompt)))
        _expect(
            got == want,
            f"trial {trial}: block_size {size}, cached prompt {cached_tokens}, new prompt "
            f"{prompt}: the hits should be blocks {want}, got {got}"
            + (" (the last prompt token is never a hit)" if len(got) > len(want) else "")
            + ".",
        )
        after = [pool.ref_count(b) for b in blocks]
        expected = [r + (b in want) for b, r in zip(blocks, refs, strict=True)]
        _expect(
            after == expected,
            f"trial {trial}: every hit block needs exactly one more reference (pool.share); "
            f"ref counts went from {refs} to {after}, expected {expected}.",
        )
    _passed("share cached prefix")


def check_copy_on_write(fn: Callable[..., tuple[int, int] | None]) -> None:
    """`fn(pool, block_table, num_tokens)` copies a shared, partly filled last block first."""
    pool = BlockPool(8, 4)
    table = pool.allocate(2)  # 6 tokens: the second block is half full
    pool.share(table)  # a fork shares both
    copy = fn(pool, table, 6)
    _expect(
        copy is not None and copy[0] != copy[1] and table[1] == copy[1],
        f"the last block is shared and half full: the table must get a private copy and the "
        f"call return (old, new); got {copy} and table {table}.",
    )
    _expect(
        pool.ref_count(copy[0]) == 1 and pool.ref_count(copy[1]) == 1,
        "the shared block should lose this table's reference, and the copy have exactly one.",
    )
    _expect(fn(pool, table, 6) is None, "the last block is private now: no copy is needed.")
    full = pool.allocate(1)
    pool.share(full)
    _expect(
        fn(pool, full, 4) is None,
        "a full last block is never written again: no copy, even when shared.",
    )
    tight = BlockPool(2, 4)
    shared = tight.allocate(2)
    tight.share(shared[1:])
    before = list(shared)
    _expect_raises(OutOfBlocks, lambda: fn(tight, shared, 5), "copying with no free block")
    _expect(
        shared == before and tight.ref_count(before[1]) == 2, "a failed copy must change nothing."
    )
    _passed("copy-on-write")


# -- chapter 05: paged attention -------------------------------------------------------------


def dense_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal_offset: int | None = None
) -> torch.Tensor:
    """float64 softmax(q k^T / sqrt(d)) v with GQA; q [n, Hq, D], k/v [T, Hkv, D]."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("nhd,thd->hnt", q, k) / math.sqrt(q.shape[-1])
    if causal_offset is not None:
        n, t = q.shape[0], k.shape[0]
        future = torch.arange(t)[None, :] > (causal_offset + torch.arange(n))[:, None]
        scores = scores.masked_fill(future, float("-inf"))
    return torch.einsum("hnt,thd->nhd", torch.softmax(scores, dim=-1), v)


def random_paged_batch(
    gen: torch.Generator,
    batch: int,
    block_size: int,
    num_kv_heads: int,
    group: int,
    head_dim: int,
    dtype: torch.dtype = torch.float32,
) -> tuple:
    """Sequences of random lengths in shuffled blocks; every unused slot holds NaN."""
    lens = torch.randint(1, 5 * block_size + 3, (batch,), generator=gen)
    blocks_per_seq = [-(-int(n) // block_size) for n in lens]
    num_blocks = sum(blocks_per_seq) + 3
    order = torch.randperm(num_blocks, generator=gen).tolist()  # non-contiguous, non-monotone
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=dtype)
    v_cache = torch.full(shape, float("nan"), dtype=dtype)
    tables = torch.full((batch, max(blocks_per_seq)), -1, dtype=torch.int32)
    dense = []
    for b, (n, nb) in enumerate(zip(lens.tolist(), blocks_per_seq, strict=True)):
        table = [order.pop() for _ in range(nb)]
        tables[b, :nb] = torch.tensor(table)
        k = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
        v = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
        for t in range(n):
            k_cache[table[t // block_size], t % block_size] = k[t]
            v_cache[table[t // block_size], t % block_size] = v[t]
        dense.append((k, v))
    q = torch.randn(batch, num_kv_heads * group, head_dim, generator=gen).to(dtype)
    return q, k_cache, v_cache, tables, lens, dense


def check_paged_decode(fn: Callable[..., torch.Tensor]) -> None:
    """`fn(q, k_cache, v_cache, block_tables, seq_lens)` equals dense attention per sequence."""
    gen = torch.Generator().manual_seed(0)
    for block_size, group in [(4, 1), (1, 2), (16, 4), (8, 2)]:
        q, k_cache, v_cache, tables, lens, dense = random_paged_batch(
            gen, 3, block_size, 2, group, 8
        )
        out = fn(q, k_cache, v_cache, tables, lens)
        _expect(
            tuple(out.shape) == tuple(q.shape),
            f"the output should have q's shape {tuple(q.shape)}, got {tuple(out.shape)}.",
        )
        _expect(
            not torch.isnan(out).any(),
            "the output has NaN: unused slots of the cache hold NaN here, so read only the "
            "blocks in a sequence's table and only its first seq_len tokens.",
        )
        for b, (k, v) in enumerate(dense):
            want = dense_attention(q[b : b + 1], k, v)[0]
            err = (out[b].double() - want).abs().max().item()
            _expect(
                err < 1e-4,
                f"block_size {block_size}, {group} query heads per KV head, sequence {b} of "
                f"length {int(lens[b])}: off by {err:.2e} from dense attention. Check the slot "
                "of token t (table[t // block_size], t % block_size) and that query head h "
                "reads KV head h // group.",
            )
    _passed("paged decode")


def check_lse_merge(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """`fn(outs [..., S, D], lses [..., S])` merges per-slice softmax results exactly."""
    gen = torch.Generator().manual_seed(1)
    for trial in range(50):
        n = int(torch.randint(2, 40, (1,), generator=gen))
        scores = torch.randn(n, generator=gen, dtype=torch.float64) * 3
        values = torch.randn(n, 4, generator=gen, dtype=torch.float64)
        cuts = sorted(torch.randint(0, n + 1, (3,), generator=gen).tolist())
        bounds = [0, *cuts, n]
        outs, lses = [], []
        for lo, hi in itertools.pairwise(bounds):
            if lo == hi:  # an empty slice: nothing to add
                outs.append(torch.zeros(4, dtype=torch.float64))
                lses.append(torch.tensor(float("-inf"), dtype=torch.float64))
            else:
                outs.append(torch.softmax(scores[lo:hi], 0) @ values[lo:hi])
                lses.append(torch.logsumexp(scores[lo:hi], 0))
        got = fn(torch.stack(outs), torch.stack(lses))
        want = torch.softmax(scores, 0) @ values
        _expect(
            torch.allclose(got, want, atol=1e-9),
            f"trial {trial}: slices {list(itertools.pairwise(bounds))} of {n} scores "
            f"merged to {got.tolist()}, but one softmax over all gives {want.tolist()}. Weight "
            "each slice by exp(its lse - logsumexp of all lses); an empty slice (lse = -inf) "
            "must weigh 0, not NaN.",
        )
    _passed("log-sum-exp merge")


def check_write_kv(fn: Callable[..., None]) -> None:
    """`fn(k_cache, v_cache, slots, k, v)` stores row i at flat slot slots[i]; -1 is skipped."""
    from paged_kv.storage import write_kv

    gen = torch.Generator().manual_seed(2)
    for trial in range(30):
        blocks, size = (
            int(torch.randint(1, 5, (1,), generator=gen)),
            int(torch.randint(1, 5, (1,), generator=gen)),
        )
        n = int(torch.randint(1, blocks * size + 1, (1,), generator=gen))
        slots = torch.randperm(blocks * size, generator=gen)[:n]
        slots[torch.rand(n, generator=gen) < 0.2] = -1
        k, v = torch.randn(n, 2, 3, generator=gen), torch.randn(n, 2, 3, generator=gen)
        theirs = (torch.zeros(blocks, size, 2, 3), torch.zeros(blocks, size, 2, 3))
        ours = (torch.zeros(blocks, size, 2, 3), torch.zeros(blocks, size, 2, 3))
        fn(theirs[0], theirs[1], slots, k, v)
        write_kv(ours[0], ours[1], slots, k, v)
        _expect(
            torch.equal(theirs[0], ours[0]) and torch.equal(theirs[1], ours[1]),
            f"trial {trial}: after writing rows at slots {slots.tolist()} into {blocks} blocks "
            f"of {size}, the caches differ from the expected ones. Slot s is block "
            "s // block_size, offset s % block_size; skip slots of -1.",
        )
    _passed("slot-mapping write")


# -- chapter 06: the serving engine -------------------------------------------------------------


@functools.cache
def _small_model() -> TinyLM:
    return TinyLM(ModelConfig(hidden_size=32, intermediate_size=64, num_layers=1), seed=0)


def _engine_trace(scheduler_cls: type[Scheduler], seed: int) -> tuple[list[Any], list[list[int]]]:
    """Serve a random small workload under tight budgets with `scheduler_cls`; return what
    every step computed and preempted, and each request's tokens."""
    rng = random.Random(seed)
    shared = [rng.randrange(256) for _ in range(rng.choice([0, 12, 20]))]
    prompts = [shared + [rng.randrange(256) for _ in range(rng.randrange(1, 20))] for _ in range(6)]
    block_size, new = rng.choice([1, 4, 8]), 6
    longest = max(reference_blocks_needed(len(p) + new, block_size) for p in prompts)
    engine = Engine(
        _small_model(),
        num_blocks=longest + rng.randrange(0, 4),
        block_size=block_size,
        max_batch_tokens=rng.choice([16, 32, 64]),
        max_running=rng.choice([2, 4, 8]),
        scheduler=scheduler_cls,
    )
    ids = [engine.add_request(p, SamplingParams(new)) for p in prompts]
    steps: list[Any] = []
    while engine.has_unfinished() and len(steps) < 500:
        plan = engine.step()
        computed = [(c.request.request_id, c.start, c.num_tokens, c.admitted) for c in plan.chunks]
        steps.append((computed, [(p.request_id, p.num_tokens) for p in plan.preempted]))
    return steps, [engine.requests[i].output for i in ids]


def _compare_traces(scheduler_cls: type[Scheduler], what: str) -> None:
    for seed in range(6):
        theirs, their_tokens = _engine_trace(scheduler_cls, seed)
        ours, our_tokens = _engine_trace(Scheduler, seed)
        for step, (mine, want) in enumerate(zip(theirs, ours, strict=False)):
            _expect(
                mine == want,
                f"workload {seed}, step {step}: your {what} led to computing {mine[0]} and "
                f"preempting {mine[1]}, the reference computes {want[0]} and preempts "
                f"{want[1]} (entries: (request, first position, tokens, admitted)).",
            )
        _expect(
            len(theirs) == len(ours), f"workload {seed}: {len(theirs)} steps, want {len(ours)}."
        )
        _expect(their_tokens == our_tokens, f"workload {seed}: the generated tokens differ.")


def check_admission(scheduler_cls: type[Scheduler]) -> None:
    """`scheduler_cls.admit_waiting` admits in order within the token, block and running caps."""
    manager = KVCacheManager(12, 4)
    shared = list(range(100, 112))
    manager.add_sequence("earlier", [*shared, 1])
    manager.free_sequence("earlier")  # its 3 full blocks stay cached
    scheduler = scheduler_cls(manager, max_batch_tokens=24, max_running=3)
    fresh = Request(0, list(range(11)), SamplingParams())
    hit = Request(1, [*shared, 7, 8], SamplingParams())  # 14 tokens, 12 of them cached
    big = Request(2, list(range(50, 65)), SamplingParams())
    tiny = Request(3, [5], SamplingParams())
    for r in (fresh, hit, big, tiny):
        scheduler.add(r)
    plan = StepPlan(0, 24)
    scheduler.admit_waiting(plan)
    got = [(c.request.request_id, c.start, c.num_tokens, c.admitted) for c in plan.chunks]
    _expect(
        got == [(0, 0, 11, True), (1, 12, 2, True)],
        f"budget 24 tokens: request 0 costs 11; request 1 has 14 tokens of which 12 are prefix "
        f"hits, so it costs 2 (price a request with manager.num_prefix_hit_tokens); request 2 "
        f"costs 15 and no longer fits, and request 3 must wait behind it. Expected chunks "
        f"[(0, 0, 11, True), (1, 12, 2, True)] as (request, start, tokens, admitted), got "
        f"{got}. A chunk starts at manager.num_cached_tokens(id).",
    )
    _expect(
        scheduler.running == [fresh, hit] and list(scheduler.waiting) == [big, tiny],
        "admitted requests move from the head of `waiting` to the end of `running`; the "
        "rest stay waiting, in order.",
    )
    _expect(
        hit.status is RequestStatus.RUNNING and big.status is RequestStatus.WAITING,
        "set request.status to RequestStatus.RUNNING when you admit it.",
    )
    _expect(
        hit.num_cached_tokens == 12 and fresh.num_cached_tokens == 0,
        "set request.num_cached_tokens to manager.num_cached_tokens(request_id) on admission.",
    )
    alone = scheduler_cls(KVCacheManager(12, 4), max_batch_tokens=8, max_running=3)
    alone.add(Request(0, list(range(20)), SamplingParams()))
    plan = StepPlan(0, 8)
    alone.admit_waiting(plan)
    _expect(
        len(plan.chunks) == 1,
        "a request costing more than the whole budget must still run, alone in an empty step; "
        "otherwise it waits forever.",
    )
    full = scheduler_cls(KVCacheManager(3, 4), max_batch_tokens=64, max_running=3)
    full.add(Request(0, list(range(20)), SamplingParams()))
    plan = StepPlan(0, 64)
    try:
        full.admit_waiting(plan)  # 5 blocks needed, 3 exist
    except OutOfBlocks as err:
        raise CheckFailed(
            "admit_waiting let OutOfBlocks escape; catch it around add_sequence and stop "
            "admitting (nothing changed, the request waits for blocks to be freed)."
        ) from err
    _expect(
        not plan.chunks and len(full.waiting) == 1 and not len(full.manager),
        "when add_sequence raises OutOfBlocks, stop admitting and leave the request waiting.",
    )
    _compare_traces(scheduler_cls, "admission")
    _passed("admission")


def check_preemption(scheduler_cls: type[Scheduler]) -> None:
    """`scheduler_cls.preempt` frees the victim's blocks and queues it first for recompute."""
    manager = KVCacheManager(16, 4)
    scheduler = scheduler_cls(manager, max_batch_tokens=64, max_running=4)
    requests = [Request(i, list(range(i * 10, i * 10 + 9)), SamplingParams()) for i in range(3)]
    for r in requests:
        scheduler.add(r)
    Scheduler.admit_waiting(scheduler, StepPlan(0, 64))
    for r in requests:
        r.output.append(1)  # sampled, pending
    waiting = Request(9, [3, 4], SamplingParams())
    scheduler.add(waiting)
    in_use = manager.pool.num_in_use
    plan = StepPlan(5, 64)
    victim = requests[2]
    scheduler.preempt(victim, plan, "a test")
    _expect(victim.request_id not in manager, "preempt must free the victim's sequence.")
    _expect(
        manager.pool.num_in_use == in_use - 3,
        "the victim's 3 blocks must be released (manager.free_sequence does it).",
    )
    _expect(victim not in scheduler.running, "remove the victim from `running`.")
    _expect(
        list(scheduler.waiting) == [victim, waiting],
        "put the victim at the *head* of `waiting` (appendleft): it was admitted before "
        "the requests still waiting, and must not lose its turn.",
    )
    _expect(victim.status is RequestStatus.WAITING, "set the victim's status to WAITING.")
    _expect(victim.num_preemptions == 1, "count it: request.num_preemptions += 1.")
    _expect(
        plan.preempted == [Preemption(5, 2, 10, "a test")],
        "record Preemption(plan.step, request id, len(request.tokens), reason) in "
        f"plan.preempted; got {plan.preempted}.",
    )
    _expect(victim.output == [1], "keep the output: recompute re-admits prompt + output.")
    _compare_traces(scheduler_cls, "preemption")
    _passed("preemption by recompute")


def check_serves_like_dense(scheduler_cls: type[Scheduler]) -> None:
    """An engine with `scheduler_cls`, short of blocks, generates the cache-free greedy tokens."""
    model = TinyLM(seed=0)
    system = list(b"You are a terse assistant. Reply in one line.\n")
    prompts = [system + list(q) for q in (b"What is paging?", b"Why blocks?", b"Who evicts?")]
    engine = Engine(model, num_blocks=12, block_size=8, scheduler=scheduler_cls)
    out = engine.generate(prompts, 24)
    preemptions = len(engine.stats().preemptions)
    for i, (completion, prompt) in enumerate(zip(out, prompts, strict=True)):
        want = greedy_dense(model, prompt, 24)
        _expect(
            completion.token_ids == want,
            f"request {i} generated {completion.token_ids}, but cache-free greedy decoding "
            f"gives {want} ({preemptions} preemptions happened on the way). An admitted "
            "request must compute every token from its prefix hits on, and a preempted one "
            "keeps its output, so that prompt + output is recomputed.",
        )
    _passed(f"served like dense decoding, through {preemptions} preemptions")
