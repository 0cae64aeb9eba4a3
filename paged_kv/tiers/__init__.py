"""Below the device pool (chapter 07): host memory, local disk and Redis, chained in a store.

A block leaves the device pool as one self-verifying blob (`codec`), under a key made of a
namespace, the model's fingerprint and the block's chained hash. `TieredStore` looks up the
longest run of a prompt's blocks across its tiers and writes new blocks through a bounded
background queue; `KVConnector` moves the bytes between the store and an engine's KV storage
(`Engine(..., store=TieredStore([...]))`). Redis needs the `tiers` extra (redis, hiredis,
prometheus_client); names that need torch, redis or prometheus_client load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from paged_kv.tiers.base import TIER_NAMES, BudgetIndex, Recorder, Tier, TierStats
from paged_kv.tiers.breaker import CircuitBreaker
from paged_kv.tiers.codec import (
    DTYPES,
    FORMAT_VERSION,
    HEADER_SIZE,
    BlobHeader,
    KeySpace,
    ModelFingerprint,
    decode_blob,
    encode_blob,
    read_header,
)
from paged_kv.tiers.disk import DiskTier
from paged_kv.tiers.host import HostTier
from paged_kv.tiers.local_redis import RedisClusterNodes, RedisServer, redis_server_path
from paged_kv.tiers.store import LoadedBlock, TieredStore, longest_run

if TYPE_CHECKING:  # what `__getattr__` loads, as type checkers should see it
    from paged_kv.tiers.connector import KVConnector, fingerprint_model, weights_digest
    from paged_kv.tiers.metrics import MetricsServer, TierMetrics
    from paged_kv.tiers.redis_tier import RedisTier

_LAZY = {
    "RedisTier": "paged_kv.tiers.redis_tier",
    "TierMetrics": "paged_kv.tiers.metrics",
    "MetricsServer": "paged_kv.tiers.metrics",
    "KVConnector": "paged_kv.tiers.connector",
    "fingerprint_model": "paged_kv.tiers.connector",
    "weights_digest": "paged_kv.tiers.connector",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'paged_kv.tiers' has no attribute {name!r}")


__all__ = [
    "DTYPES",
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "TIER_NAMES",
    "BlobHeader",
    "BudgetIndex",
    "CircuitBreaker",
    "DiskTier",
    "HostTier",
    "KVConnector",
    "KeySpace",
    "LoadedBlock",
    "MetricsServer",
    "ModelFingerprint",
    "Recorder",
    "RedisClusterNodes",
    "RedisServer",
    "RedisTier",
    "Tier",
    "TierMetrics",
    "TierStats",
    "TieredStore",
    "decode_blob",
    "encode_blob",
    "fingerprint_model",
    "longest_run",
    "read_header",
    "redis_server_path",
    "weights_digest",
]
