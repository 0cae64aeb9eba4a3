"""The prefix cache: which physical block holds the full block with a given chained hash.

It only indexes; the pool owns the blocks and their states. A block is indexed while it
holds its content (in use or cached) and forgotten when the pool evicts it.
"""

from __future__ import annotations

from collections.abc import Sequence

from paged_kv.cache.hashing import BlockHash


class PrefixCache:
    """hash -> block id for full blocks, and back. O(1) per block looked up or registered.

    Two live blocks can hold the same content (two requests computed the same prefix before
    either registered it). The first registered keeps the hash; the second is not indexed,
    stays private to its sequence and is freed, not cached, when released.
    """

    def __init__(self) -> None:
        self._block_of: dict[BlockHash, int] = {}
        self._hash_of: dict[int, BlockHash] = {}

    def __len__(self) -> int:
        return len(self._block_of)

    def longest_prefix(self, hashes: Sequence[BlockHash]) -> list[int]:
        """Blocks holding the longest run of `hashes` from the start (stops at the first miss)."""
        blocks = []
        for h in hashes:
            block = self._block_of.get(h)
            if block is None:
                break
            blocks.append(block)
        return blocks

    def register(self, block_id: int, block_hash: BlockHash) -> bool:
        """Index `block_id` under `block_hash`; False if another block already holds it."""
        if block_hash in self._block_of:
            return False
        self._block_of[block_hash] = block_id
        self._hash_of[block_id] = block_hash
        return True

    def hash_of(self, block_id: int) -> BlockHash | None:
        """The hash a block is indexed under, if any."""
        return self._hash_of.get(block_id)

    def forget(self, block_id: int) -> None:
        """The pool evicted `block_id`: its content is gone."""
        block_hash = self._hash_of.pop(block_id, None)
        if block_hash is not None:
            del self._block_of[block_hash]
