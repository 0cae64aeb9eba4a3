"""The library's chapter-04 pieces, as the earlier exercises had them (used by its tests):
sharing the longest cached prefix, and copy-on-write of a shared, partly filled last block."""

from __future__ import annotations

import random
from collections.abc import Callable

from paged_kv.cache.block_pool import BlockPool
from paged_kv.cache.hashing import block_hashes
from paged_kv.cache.prefix_cache import PrefixCache
from paged_kv.course.checks import causes
from paged_kv.course.checks.failures import expect, expect_raises, passed
from paged_kv.errors import OutOfBlocks


def check_share_cached_prefix(fn: Callable[..., list[int]]) -> None:
    """`fn(pool, cache, hashes, num_prompt_tokens)` shares the longest cached run of `hashes`.

    It never covers the last prompt token and takes one reference on each block it returns.
    """

    rng = random.Random(0)
    for trial in range(300):
        size = rng.randint(1, 4)
        pool, cache = BlockPool(32, size), PrefixCache()
        cached_tokens = [rng.randrange(3) for _ in range(rng.randint(0, 5 * size))]
        cached = block_hashes(cached_tokens, size)
        blocks = pool.allocate(len(cached))
        for block, digest in zip(blocks, cached, strict=True):
            cache.register(block, digest)
        pool.keep_content(blocks)
        if rng.random() < 0.5:
            pool.release(blocks)  # cached, not in use: a hit revives them
        prompt = [rng.randrange(3) for _ in range(rng.randint(1, 6 * size))]
        hashes = block_hashes(prompt, size)
        refs = [pool.ref_count(b) for b in blocks]
        want = cache.longest_prefix(hashes[: (len(prompt) - 1) // size])
        got = list(fn(pool, cache, hashes, len(prompt)))
        expect(
            got == want,
            f"trial {trial}: block_size {size}, cached prompt {cached_tokens}, new prompt "
            f"{prompt}: the hits should be blocks {want}, got {got}"
            + (" (the last prompt token is never a hit)" if len(got) > len(want) else "")
            + ".",
            causes.WRONG_RESULT,
        )
        after = [pool.ref_count(b) for b in blocks]
        expected = [r + (b in want) for b, r in zip(blocks, refs, strict=True)]
        expect(
            after == expected,
            f"trial {trial}: every hit block needs exactly one more reference (pool.share); "
            f"ref counts went from {refs} to {after}, expected {expected}.",
            causes.WRONG_RESULT,
        )
    passed("share cached prefix")


def check_copy_on_write(fn: Callable[..., tuple[int, int] | None]) -> None:
    """`fn(pool, block_table, num_tokens)` copies a shared, partly filled last block first."""
    pool = BlockPool(8, 4)
    table = pool.allocate(2)  # 6 tokens: the second block is half full
    pool.share(table)  # a fork shares both
    copy = fn(pool, table, 6)
    expect(
        copy is not None and copy[0] != copy[1] and table[1] == copy[1],
        f"the last block is shared and half full: the table must get a private copy and the "
        f"call return (old, new); got {copy} and table {table}.",
        causes.WRONG_RESULT,
    )
    assert copy is not None
    expect(
        pool.ref_count(copy[0]) == 1 and pool.ref_count(copy[1]) == 1,
        "the shared block should lose this table's reference, and the copy have exactly one.",
        causes.WRONG_RESULT,
    )
    expect(
        fn(pool, table, 6) is None,
        "the last block is private now: no copy is needed.",
        causes.WRONG_RESULT,
    )
    full = pool.allocate(1)
    pool.share(full)
    expect(
        fn(pool, full, 4) is None,
        "a full last block is never written again: no copy, even when shared.",
        causes.WRONG_RESULT,
    )
    tight = BlockPool(2, 4)
    shared = tight.allocate(2)
    tight.share(shared[1:])
    before = list(shared)
    expect_raises(OutOfBlocks, lambda: fn(tight, shared, 5), "copying with no free block")
    expect(
        shared == before and tight.ref_count(before[1]) == 2,
        "a failed copy must change nothing.",
        causes.WRONG_RESULT,
    )
    passed("copy-on-write")
