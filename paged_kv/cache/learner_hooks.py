"""Your own parts in the manager's place (chapter 04): the chained hash, the prefix lookup
and the all-or-nothing table allocation, each checked before the manager uses its result.

`KVCacheManager(block_hasher=..., prefix_lookup=..., allocate_table=...)` builds one of these.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from paged_kv.cache.hashing import BlockHash
from paged_kv.cache.prefix_cache import PrefixCache
from paged_kv.cache.sequence import TokenSequence
from paged_kv.errors import InvalidArgument

BlockHasher = Callable[..., Sequence[BlockHash]]
"""`block_hasher(token_ids, block_size, salt=None)`: one chained hash per full block."""
PrefixLookup = Callable[[Mapping[BlockHash, int], Sequence[BlockHash], int, int], Sequence[int]]
"""`prefix_lookup(index, hashes, num_prompt_tokens, block_size)`: the blocks of the longest
cached run of `hashes` from the start, never covering the prompt's last token."""
TableAllocator = Callable[[Any, list[int], int], Sequence[int]]
"""`allocate_table(pool, hit_blocks, num_blocks)`: a new table of `num_blocks` blocks, the hits
(shared) first, all or nothing."""


class LearnerHooks:
    """Your own parts in the manager's place (chapter 04): the chained hash, the prefix lookup
    and the all-or-nothing table allocation. Their results are checked before they are used,
    so that a wrong part fails loudly, naming itself, instead of corrupting the cache."""

    def __init__(
        self,
        block_hasher: BlockHasher | None,
        prefix_lookup: PrefixLookup | None,
        allocate_table: TableAllocator | None,
        block_size: int,
    ) -> None:
        self.block_hasher, self.prefix_lookup = block_hasher, prefix_lookup
        self.allocate_table, self.block_size = allocate_table, block_size
        self.active = block_hasher is not None or prefix_lookup is not None
        self._memo: weakref.WeakKeyDictionary[TokenSequence, list[BlockHash]] = (
            weakref.WeakKeyDictionary()
        )

    def __getstate__(self) -> dict[str, object]:
        """Copies and pickles leave the memo behind (weak references do not pickle; it is
        only a cache, refilled on use)."""
        return {k: v for k, v in self.__dict__.items() if k != "_memo"}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._memo = weakref.WeakKeyDictionary()

    def hashes(self, seq: TokenSequence) -> list[BlockHash]:
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

    def register(
        self, cache: PrefixCache, seq: TokenSequence, table: Sequence[int], start: int
    ) -> list[int]:
        """Index `seq`'s full blocks from `start` on under your hashes; return the new ones."""
        return cache.register_hashes(table, start, self.hashes(seq))

    def hits(self, cache: PrefixCache, seq: TokenSequence, max_hits: int) -> list[int]:
        """Blocks of the cached prefix: `prefix_lookup`'s answer, checked, or the library's."""
        hashes = self.hashes(seq)
        if self.prefix_lookup is None:
            return cache.longest_prefix(hashes[:max_hits])
        index = MappingProxyType(cache._block_of)  # read-only: a lookup changes nothing
        blocks = list(self.prefix_lookup(index, list(hashes), len(seq), self.block_size))
        want = cache.longest_prefix(hashes[:max_hits])
        if blocks != want:
            raise InvalidArgument(
                f"prefix_lookup returned blocks {blocks} for a {len(seq)}-token prompt, but the "
                f"longest cached run of its block hashes, never covering its last token, is "
                f"{want}."
            )
        return blocks

    def table(self, pool: Any, hit_blocks: list[int], num_blocks: int) -> list[int]:
        """`allocate_table`'s new block table: the hits (shared) then fresh blocks."""
        assert self.allocate_table is not None
        table = list(self.allocate_table(pool, list(hit_blocks), num_blocks))
        if len(table) != num_blocks or table[: len(hit_blocks)] != list(hit_blocks):
            raise InvalidArgument(
                f"allocate_table returned {table}: it must return {num_blocks} blocks, the "
                f"hits {list(hit_blocks)} first."
            )
        return table
