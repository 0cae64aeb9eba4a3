"""Choosing the prefix index by name: vLLM's chained block hashes or SGLang's radix tree.

Both answer the manager through one interface (`match`, `register_blocks`, `share_path`,
`release_path`, `forget`, `content_key`); see `PrefixCache` and `RadixCache`.
"""

from __future__ import annotations

from typing import Literal

from paged_kv.cache.prefix_cache import PrefixCache
from paged_kv.cache.radix_cache import RadixCache
from paged_kv.errors import InvalidArgument

PrefixIndexName = Literal["hash", "radix"]


def make_prefix_index(name: PrefixIndexName, block_size: int) -> PrefixCache | RadixCache:
    """The prefix index by name: vLLM's chained block hashes or SGLang's radix tree."""
    if name == "hash":
        return PrefixCache(block_size)
    if name == "radix":
        return RadixCache(block_size)
    raise InvalidArgument(
        f"prefix_index must be 'hash' (chained block hashes) or 'radix' (a radix tree of "
        f"tokens), got {name!r}."
    )
