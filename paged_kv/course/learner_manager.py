"""A `KVCacheManager` on a learner's parts: the chapter 01 pool, and chapter 04's chained hash,
prefix lookup and all-or-nothing table allocation, each checked before its result is used, so
that a wrong part fails loudly, naming itself, instead of corrupting the cache.

`learner_manager(num_blocks, block_size, pool=..., block_hasher=..., ...)` builds one; any
part left out is the library's own. The library's manager knows nothing of this: the parts
come in through the protected methods it lets a subclass replace.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from paged_kv.cache.block_pool import Allocation
from paged_kv.cache.block_table import blocks_needed
from paged_kv.cache.caching_pool import CachingPool, RefCountedPool
from paged_kv.cache.eviction import PolicySpec
from paged_kv.cache.hashing import BlockHash
from paged_kv.cache.live_sequences import SeqId, SequenceEntry
from paged_kv.cache.manager import KVCacheManager
from paged_kv.cache.prefix_cache import PrefixCache
from paged_kv.cache.sequence import TokenSequence
from paged_kv.errors import InvalidArgument

PoolClass = Callable[[int, int], RefCountedPool]
"""`pool(num_blocks, block_size)`: a reference-counted pool (chapter 01's `FreeListPool`)."""
BlockHasher = Callable[..., Sequence[BlockHash]]
"""`block_hasher(token_ids, block_size, salt=None)`: one chained hash per full block."""
PrefixLookup = Callable[[Mapping[BlockHash, int], Sequence[BlockHash], int, int], Sequence[int]]
"""`prefix_lookup(index, hashes, num_prompt_tokens, block_size)`: the blocks of the longest
cached run of `hashes` from the start, never covering the prompt's last token."""
TableAllocator = Callable[[CachingPool, list[int], int], Sequence[int]]
"""`allocate_table(pool, hit_blocks, num_blocks)`: a new table of `num_blocks` blocks, the hits
(shared) first, all or nothing."""


def learner_manager(
    num_blocks: int,
    block_size: int = 16,
    *,
    pool: PoolClass | None = None,
    block_hasher: BlockHasher | None = None,
    prefix_lookup: PrefixLookup | None = None,
    allocate_table: TableAllocator | None = None,
    **manager_kwargs: Any,
) -> KVCacheManager:
    """A `KVCacheManager(num_blocks, block_size, **manager_kwargs)` on the learner's parts.

    `pool` is a class called as `pool(num_blocks, block_size)`; the library's caching layer
    (cached blocks, eviction) wraps it as it wraps its own pool. The hash, lookup and table
    allocation are the hash chain's parts: they need `prefix_index="hash"` (the default)."""
    if pool is None and block_hasher is None and prefix_lookup is None and allocate_table is None:
        return KVCacheManager(num_blocks, block_size, **manager_kwargs)
    return LearnerManager(
        num_blocks,
        block_size,
        pool=pool,
        block_hasher=block_hasher,
        prefix_lookup=prefix_lookup,
        allocate_table=allocate_table,
        **manager_kwargs,
    )


class LearnerManager(KVCacheManager):
    """The manager with a learner's parts in place of the library's (see `learner_manager`)."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int = 16,
        *,
        pool: PoolClass | None,
        block_hasher: BlockHasher | None,
        prefix_lookup: PrefixLookup | None,
        allocate_table: TableAllocator | None,
        **manager_kwargs: Any,
    ) -> None:
        hooks = block_hasher or prefix_lookup or allocate_table
        if hooks is not None and manager_kwargs.get("prefix_index", "hash") != "hash":
            raise InvalidArgument(
                "the learner hooks (block_hasher, prefix_lookup, allocate_table) are parts of "
                "the hash chain; use them with prefix_index='hash'."
            )
        self.learner_pool = pool
        self.block_hasher, self.prefix_lookup = block_hasher, prefix_lookup
        self.allocate_table = allocate_table
        self._memo: weakref.WeakKeyDictionary[TokenSequence, list[BlockHash]] = (
            weakref.WeakKeyDictionary()
        )
        super().__init__(num_blocks, block_size, **manager_kwargs)
        index = self.prefix_cache  # the hash chain, for the hooks (checked above)
        self.hash_index = index if isinstance(index, PrefixCache) else None

    def _new_pool(
        self,
        num_blocks: int,
        block_size: int,
        *,
        blocks_per_page: int | None,
        allocation: Allocation,
        eviction: PolicySpec,
        on_evict: Callable[[int], None] | None,
    ) -> CachingPool:
        if self.learner_pool is None:
            return super()._new_pool(
                num_blocks,
                block_size,
                blocks_per_page=blocks_per_page,
                allocation=allocation,
                eviction=eviction,
                on_evict=on_evict,
            )
        if blocks_per_page is not None or allocation != "fifo":
            raise InvalidArgument("pages and the allocation order belong to the pool you pass.")
        base = self.learner_pool(num_blocks, block_size)
        return CachingPool(base, eviction=eviction, on_evict=on_evict)

    def _hashes(self, seq: TokenSequence) -> list[BlockHash]:
        """The chained hashes of `seq`'s full blocks, from `block_hasher` if there is one."""
        if self.block_hasher is None:
            return seq.full_block_hashes(self.block_size)
        full = len(seq) // self.block_size
        memo = self._memo.get(seq)
        if memo is None or len(memo) != full:
            if seq.extra_keys:
                raise InvalidArgument("block_hasher does not take extra keys; pass none.")
            memo = list(self.block_hasher(list(seq.token_ids), self.block_size, salt=seq.salt))
            if len(memo) != full or not all(isinstance(h, bytes) for h in memo):
                raise InvalidArgument(
                    f"block_hasher returned {len(memo)} value(s) for {full} full block(s) of "
                    f"{len(seq)} tokens; it must return one bytes hash per full block."
                )
            self._memo[seq] = memo
        return memo

    def _prefix_hits(self, seq: TokenSequence) -> list[int]:
        index = self.hash_index
        if self.block_hasher is None and self.prefix_lookup is None:
            return super()._prefix_hits(seq)
        if index is None:  # no prefix caching
            return []
        max_hits = (len(seq.token_ids) - 1) // self.block_size  # the last token is computed
        hashes = self._hashes(seq)
        want = index.longest_prefix(hashes[:max_hits])
        if self.prefix_lookup is None:
            return want
        view = index.block_of_hash()  # read-only: a lookup changes nothing
        blocks = list(self.prefix_lookup(view, list(hashes), len(seq), self.block_size))
        if blocks != want:
            raise InvalidArgument(
                f"prefix_lookup returned blocks {blocks} for a {len(seq)}-token prompt, but the "
                f"longest cached run of its block hashes, never covering its last token, is "
                f"{want}."
            )
        return blocks

    def _new_table(self, seq_id: SeqId, hit_blocks: list[int], num_tokens: int) -> list[int]:
        if self.allocate_table is None:
            return super()._new_table(seq_id, hit_blocks, num_tokens)
        num_blocks = blocks_needed(num_tokens, self.block_size)
        table = list(self.allocate_table(self.pool, list(hit_blocks), num_blocks))
        if len(table) != num_blocks or table[: len(hit_blocks)] != list(hit_blocks):
            raise InvalidArgument(
                f"allocate_table returned {table}: it must return {num_blocks} blocks, the "
                f"hits {list(hit_blocks)} first."
            )
        return table

    def _index_full_blocks(self, entry: SequenceEntry, full: int) -> list[int]:
        index = self.hash_index
        if index is None or self.block_hasher is None:
            return super()._index_full_blocks(entry, full)
        return index.register_hashes(
            entry.block_table, entry.num_registered, self._hashes(entry.seq)
        )
