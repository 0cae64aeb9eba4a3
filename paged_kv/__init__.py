"""paged_kv: the KV-cache manager of an LLM server, built chapter by chapter.

Import the pieces from here: `BlockPool`, `KVCacheManager`, the errors; the views are in
`paged_kv.widgets`, the attention op in `paged_kv.attention`, the serving engine and its model in
`paged_kv.engine` and `paged_kv.model`.
"""

from paged_kv.block_pool import BlockPool, BlockState
from paged_kv.errors import (
    CacheBusy,
    DuplicateSequence,
    InvalidArgument,
    InvalidBlock,
    OutOfBlocks,
    PagedKVError,
    UnknownSequence,
)
from paged_kv.manager import KVCacheManager, UsageStats
from paged_kv.snapshot import BlockInfo, PoolSnapshot

__version__ = "0.1.0"

__all__ = [
    "BlockInfo",
    "BlockPool",
    "BlockState",
    "CacheBusy",
    "DuplicateSequence",
    "InvalidArgument",
    "InvalidBlock",
    "KVCacheManager",
    "OutOfBlocks",
    "PagedKVError",
    "PoolSnapshot",
    "UnknownSequence",
    "UsageStats",
    "__version__",
]
