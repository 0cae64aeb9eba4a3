"""A `KVCacheManager` on a learner's parts, put in through the protected methods the library's
manager lets a subclass replace, each part's result checked before use (a wrong part fails
loudly, naming itself, instead of corrupting the cache). A part left out is the library's:
- `pool(num_blocks, block_size)`: a ref-counted pool class, under the library's caching layer;
- `block_hasher(token_ids, block_size, salt=None)`: one chained bytes hash per full block;
- `prefix_lookup(index, hashes, num_prompt_tokens, block_size)`: the blocks of the longest
  cached run of `hashes` from the start, never covering the prompt's last token;
- `allocate_table(pool, hit_blocks, num_blocks)`: `num_blocks` blocks, the hits (shared) first,
  all or nothing. These three are the hash chain's: they need `prefix_index="hash"`.
"""

from __future__ import annotations

import weakref
from typing import Any

from paged_kv.cache.block_table import blocks_needed
from paged_kv.cache.caching_pool import CachingPool
from paged_kv.cache.hashing import BlockHash
from paged_kv.cache.live_sequences import SeqId, SequenceEntry
from paged_kv.cache.manager import KVCacheManager
from paged_kv.cache.prefix_cache import PrefixCache
from paged_kv.cache.sequence import TokenSequence
from paged_kv.errors import InvalidArgument


def learner_manager(num_blocks: int, block_size: int = 16, **kwargs: Any) -> KVCacheManager:
    """`KVCacheManager(num_blocks, block_size, **kwargs)` on the parts among `kwargs` (`pool`,
    `block_hasher`, `prefix_lookup`, `allocate_table`); the library's manager if none is given."""
    if any(kwargs.get(name) is not None for name in LearnerManager.PARTS):
        return LearnerManager(num_blocks, block_size, **kwargs)
    options = {k: v for k, v in kwargs.items() if k not in LearnerManager.PARTS}
    return KVCacheManager(num_blocks, block_size, **options)


class LearnerManager(KVCacheManager):
    """The manager with a learner's parts in place of the library's (see the module)."""

    PARTS = ("pool", "block_hasher", "prefix_lookup", "allocate_table")

    def __init__(self, num_blocks: int, block_size: int = 16, **kwargs: Any) -> None:
        parts = [kwargs.pop(name, None) for name in self.PARTS]
        self.learner_pool, self.block_hasher, self.prefix_lookup, self.allocate_table = parts
        if any(parts[1:]) and kwargs.get("prefix_index", "hash") != "hash":
            raise InvalidArgument(
                "the learner hooks (block_hasher, prefix_lookup, allocate_table) are parts of "
                "the hash chain; use them with prefix_index='hash'."
            )
        self._memo = weakref.WeakKeyDictionary[TokenSequence, list[BlockHash]]()
        super().__init__(num_blocks, block_size, **kwargs)
        index = self.prefix_cache  # the hash chain (or none) wherever a chain part is used
        self.hash_index = index if isinstance(index, PrefixCache) else None

    def _new_pool(self, num_blocks: int, block_size: int, **options: Any) -> CachingPool:
        if self.learner_pool is None:
            return super()._new_pool(num_blocks, block_size, **options)
        if options["blocks_per_page"] is not None or options["allocation"] != "fifo":
            raise InvalidArgument("pages and the allocation order belong to the pool you pass.")
        base = self.learner_pool(num_blocks, block_size)
        return CachingPool(base, eviction=options["eviction"], on_evict=options["on_evict"])

    def _hashes(self, seq: TokenSequence) -> list[BlockHash]:
        """The chained hashes of `seq`'s full blocks, from `block_hasher` if there is one, kept
        until `seq` grows a block (the scheduler prices a waiting request at every step)."""
        if self.block_hasher is None:
            return seq.full_block_hashes(self.block_size)
        full, memo = len(seq) // self.block_size, self._memo.get(seq)
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
        index = self.hash_index  # (None: no prefix caching, and the library's finds no hit)
        if index is None or (self.block_hasher is None and self.prefix_lookup is None):
            return super()._prefix_hits(seq)
        hashes = self._hashes(seq)
        want = index.longest_prefix(hashes[: (len(seq) - 1) // self.block_size])  # not the last
        if self.prefix_lookup is None:
            return want
        blocks = list(
            self.prefix_lookup(index.block_of_hash(), list(hashes), len(seq), self.block_size)
        )
        if blocks != want:
            raise InvalidArgument(
                f"prefix_lookup returned blocks {blocks} for a {len(seq)}-token prompt, but the "
                "longest cached run of its block hashes, never covering its last token, is "
                f"{want}."
            )
        return blocks

    def _new_table(self, seq_id: SeqId, hit_blocks: list[int], num_tokens: int) -> list[int]:
        if self.allocate_table is None:
            return super()._new_table(seq_id, hit_blocks, num_tokens)
        num_blocks = blocks_needed(num_tokens, self.block_size)
        table = list(self.allocate_table(self.pool, list(hit_blocks), num_blocks))
        if len(table) != num_blocks or table[: len(hit_blocks)] != hit_blocks:
            raise InvalidArgument(
                f"allocate_table returned {table}: it must return {num_blocks} blocks, the "
                f"hits {hit_blocks} first."
            )
        return table

    def _index_full_blocks(self, entry: SequenceEntry, full: int) -> list[int]:
        index = self.hash_index
        if index is None or self.block_hasher is None:
            return super()._index_full_blocks(entry, full)
        hashes = self._hashes(entry.seq)
        return index.register_hashes(entry.block_table, entry.num_registered, hashes)
