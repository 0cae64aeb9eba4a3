"""The cache layer (chapters 01–04): blocks, block tables, eviction and prefix caching.

Nothing here knows about tensors or models: a block is an id, a sequence is a list of token
ids. `KVCacheManager` is the one entry point the serving layer uses.
"""

from paged_kv.cache.arc import ARC
from paged_kv.cache.block_pool import Allocation, BlockPool
from paged_kv.cache.block_table import blocks_needed, copy_on_write, grow_block_table, slot_mapping
from paged_kv.cache.caching_pool import CachingPool, RefCountedPool
from paged_kv.cache.eviction import (
    FIFO,
    LFU,
    LRU,
    POLICIES,
    AgingLFU,
    EvictionPolicy,
    PolicySpec,
    keyed_policy,
    make_policy,
)
from paged_kv.cache.free_lists import FifoFreeList, PackedPagesFreeList
from paged_kv.cache.hashing import BlockHash, block_hashes, hash_block
from paged_kv.cache.history_lfu import HistoryLFU
from paged_kv.cache.hit_metrics import HitRates, PrefixHitCounter
from paged_kv.cache.manager import KVCacheManager, SeqId
from paged_kv.cache.prefix_cache import PrefixCache
from paged_kv.cache.prefix_index import PrefixIndex
from paged_kv.cache.radix_cache import LeafFirst, RadixCache
from paged_kv.cache.ref_count_pool import RefCountPool
from paged_kv.cache.s3fifo import S3FIFO
from paged_kv.cache.sequence import TokenSequence
from paged_kv.cache.snapshot import BlockInfo, BlockState, PoolSnapshot
from paged_kv.cache.tinylfu import FrequencySketch, WTinyLFU
from paged_kv.cache.usage import UsageStats

__all__ = [
    "ARC",
    "FIFO",
    "LFU",
    "LRU",
    "POLICIES",
    "S3FIFO",
    "AgingLFU",
    "Allocation",
    "BlockHash",
    "BlockInfo",
    "BlockPool",
    "BlockState",
    "CachingPool",
    "EvictionPolicy",
    "FifoFreeList",
    "FrequencySketch",
    "HistoryLFU",
    "HitRates",
    "KVCacheManager",
    "LeafFirst",
    "PackedPagesFreeList",
    "PolicySpec",
    "PoolSnapshot",
    "PrefixCache",
    "PrefixHitCounter",
    "PrefixIndex",
    "RadixCache",
    "RefCountPool",
    "RefCountedPool",
    "SeqId",
    "TokenSequence",
    "UsageStats",
    "WTinyLFU",
    "block_hashes",
    "blocks_needed",
    "copy_on_write",
    "grow_block_table",
    "hash_block",
    "keyed_policy",
    "make_policy",
    "slot_mapping",
]
