"""The prefix cache: which physical block holds the full block with a given chained hash.

It only indexes; the pool owns the blocks and their states. A block is indexed while it
holds its content (in use or cached) and forgotten when the pool evicts it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import repeat
from types import MappingProxyType

from paged_kv.cache.eviction import EvictionPolicy
from paged_kv.cache.hashing import BlockHash
from paged_kv.cache.sequence import TokenSequence
from paged_kv.validation import require_positive_int


class PrefixCache:
    """hash -> block id for full blocks, and back. O(1) per block looked up or registered.

    Two live blocks can hold the same content (two requests computed the same prefix before
    either registered it). The first registered keeps the hash; the second is not indexed,
    stays private to its sequence and is freed, not cached, when released.

    The manager talks to it as a `PrefixIndex` (`match`, `register_blocks`, `share_path`,
    `release_path`, `forget`, `content_key`, `guard_policy`), as to `RadixCache`; `block_size`
    is needed for those (the hash-level calls below work without it).
    """

    name = "hash"

    def __init__(self, block_size: int | None = None) -> None:
        self.block_size = (
            None if block_size is None else require_positive_int("block_size", block_size)
        )
        self._block_of: dict[BlockHash, int] = {}
        self._hash_of: dict[int, BlockHash] = {}

    # -- the prefix-index interface the manager uses --------------------------------------

    def match(self, seq: TokenSequence, max_blocks: int) -> list[int]:
        """Blocks of the longest cached run of `seq`'s full blocks, at most `max_blocks`."""
        return self.longest_prefix(seq.full_block_hashes(self._size())[:max_blocks])

    def register_blocks(
        self, seq: TokenSequence, table: Sequence[int], start: int, end: int, path: None = None
    ) -> tuple[list[int], None]:
        """Index full blocks `start..end-1` of `seq`, held in `table`; return the blocks newly
        indexed (the caller keeps their content) and the sequence's path (none here)."""
        hashes = seq.full_block_hashes(self._size())  # exactly `end` of them: all full blocks
        return self.register_hashes(table, start, hashes), None

    def register_hashes(
        self, table: Sequence[int], start: int, hashes: Sequence[BlockHash]
    ) -> list[int]:
        """Index `table[i]` under `hashes[i]` for i >= start; return the blocks newly indexed."""
        kept = []
        for i in range(start, len(hashes)):
            block, block_hash = table[i], hashes[i]
            if self._hash_of.get(block) == block_hash:
                continue  # a prefix hit: indexed already
            if self.register(block, block_hash):
                kept.append(block)
        return kept

    def share_path(self, path: None) -> None:
        """A fork shares its parent's path (the hash chain keeps none)."""

    def release_path(self, path: None) -> None:
        """A sequence that held `path` is gone (the hash chain keeps no locks)."""

    def content_key(self, block_id: int) -> BlockHash | None:
        """What eviction policies remember a block's content by: its hash."""
        return self._hash_of.get(block_id)

    def guard_policy(self, policy: EvictionPolicy) -> EvictionPolicy:
        """The pool's policy as it is: any cached block may go (a chain has no inner nodes)."""
        return policy

    def _size(self) -> int:
        if self.block_size is None:
            raise TypeError("PrefixCache(block_size) is needed to match or register sequences.")
        return self.block_size

    # -- hash-level calls -----------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._block_of)

    def longest_prefix(self, hashes: Sequence[BlockHash]) -> list[int]:
        """Blocks holding the longest run of `hashes` from the start (cut at the first miss)."""
        blocks = list(map(self._block_of.get, hashes, repeat(-1, len(hashes))))  # -1: a miss
        if -1 in blocks:
            del blocks[blocks.index(-1) :]
        return blocks

    def register(self, block_id: int, block_hash: BlockHash) -> bool:
        """Index `block_id` under `block_hash`; False if another block already holds it."""
        if block_hash in self._block_of:
            return False
        self._block_of[block_hash] = block_id
        self._hash_of[block_id] = block_hash
        return True

    def block_of_hash(self) -> Mapping[BlockHash, int]:
        """hash -> block id of every indexed block: a read-only live view."""
        return MappingProxyType(self._block_of)

    def hash_of(self, block_id: int) -> BlockHash | None:
        """The hash a block is indexed under, if any."""
        return self._hash_of.get(block_id)

    def forget(self, block_id: int) -> None:
        """The pool evicted `block_id`: its content is gone."""
        block_hash = self._hash_of.pop(block_id, None)
        if block_hash is not None:
            del self._block_of[block_hash]
