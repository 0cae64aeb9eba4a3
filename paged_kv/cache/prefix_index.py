"""The prefix index the manager talks to, and choosing one by name: vLLM's chained block
hashes (`PrefixCache`) or SGLang's radix tree (`RadixCache`).

Both implement `PrefixIndex`. A live sequence may hold a *path* in the index (the radix tree
locks the nodes it uses; the hash chain keeps none): the manager keeps it in the sequence's
entry and hands it back, never looking inside.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Literal, Protocol, TypeVar

from paged_kv.cache.eviction import EvictionPolicy
from paged_kv.cache.prefix_cache import PrefixCache
from paged_kv.cache.radix_cache import RadixCache
from paged_kv.cache.sequence import TokenSequence
from paged_kv.errors import InvalidArgument

PrefixIndexName = Literal["hash", "radix"]
Path = TypeVar("Path")


class PrefixIndex(Protocol[Path]):
    """Which cached blocks hold a sequence's leading full blocks; told when the pool evicts.

    It only indexes: the pool owns the blocks and their states. `Path` is what a live sequence
    holds in the index (None for the hash chain)."""

    name: str

    def __len__(self) -> int:
        """Number of blocks indexed."""
        ...

    def match(self, seq: TokenSequence, max_blocks: int) -> list[int]:
        """Blocks of the longest cached run of `seq`'s full blocks, at most `max_blocks`;
        read-only."""
        ...

    def register_blocks(
        self, seq: TokenSequence, table: Sequence[int], start: int, end: int, path: Path | None
    ) -> tuple[list[int], Path | None]:
        """Index full blocks `start..end-1` of `seq` (held in `table`); return the blocks
        newly indexed (the caller keeps their content) and the sequence's path."""
        ...

    def share_path(self, path: Path | None) -> Path | None:
        """A fork holds every block of its parent: the child's path."""
        ...

    def release_path(self, path: Path | None) -> None:
        """The sequence that held `path` is gone."""
        ...

    def forget(self, block_id: int) -> None:
        """The pool evicted `block_id`: its content is gone."""
        ...

    def content_key(self, block_id: int) -> Hashable | None:
        """What eviction policies remember a block's content by (None: not indexed)."""
        ...

    def guard_policy(self, policy: EvictionPolicy) -> EvictionPolicy:
        """The pool's eviction policy, limited to the blocks this index lets go."""
        ...


def make_prefix_index(name: PrefixIndexName, block_size: int) -> PrefixIndex[Any]:
    """The prefix index by name: vLLM's chained block hashes or SGLang's radix tree."""
    if name == "hash":
        return PrefixCache(block_size)
    if name == "radix":
        return RadixCache(block_size)
    raise InvalidArgument(
        f"prefix_index must be 'hash' (chained block hashes) or 'radix' (a radix tree of "
        f"tokens), got {name!r}."
    )
