"""A `KVCacheManager` built on a learner's parts: their pool, hash, lookup or table allocator.

The one place the course wires a learner's parts into the library's manager (the checks and
`parts` call it); every part left as None is the library's own. (A shim over the manager's
own hooks in this branch.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from paged_kv.cache.caching_pool import RefCountedPool
from paged_kv.cache.learner_hooks import BlockHasher, PrefixLookup, TableAllocator
from paged_kv.cache.manager import KVCacheManager


def learner_manager(
    num_blocks: int,
    block_size: int,
    *,
    pool: Callable[[int, int], RefCountedPool] | None = None,
    block_hasher: BlockHasher | None = None,
    prefix_lookup: PrefixLookup | None = None,
    allocate_table: TableAllocator | None = None,
    **manager_kwargs: Any,
) -> KVCacheManager:
    """A manager of `num_blocks` blocks of `block_size` tokens on the learner's parts."""
    return KVCacheManager(
        num_blocks,
        block_size,
        pool=pool,
        block_hasher=block_hasher,
        prefix_lookup=prefix_lookup,
        allocate_table=allocate_table,
        **manager_kwargs,
    )
