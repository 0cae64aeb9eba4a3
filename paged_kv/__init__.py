"""paged_kv: the KV-cache manager of an LLM server, built chapter by chapter.

The core names import from here. Each layer is a subpackage that exports its own names:
`paged_kv.cache` (pool, eviction, prefix caching, manager), `paged_kv.attention` (KV storage
and paged-attention kernels), `paged_kv.serving` (model, scheduler, engine), `paged_kv.study`
(simulators and workloads), `paged_kv.widgets` (views) and `paged_kv.course` (exercise checks).
Names that need torch (`Engine`, `TinyLM`, `load_tiny_lm`, `paged_decode`, ...) load on first
use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from paged_kv.cache import (
    FIFO,
    LFU,
    LRU,
    AgingLFU,
    BlockInfo,
    BlockPool,
    BlockState,
    EvictionPolicy,
    KVCacheManager,
    PoolSnapshot,
    UsageStats,
)
from paged_kv.errors import (
    CacheBusy,
    DuplicateSequence,
    EngineBusy,
    InvalidArgument,
    InvalidBlock,
    InvalidModelOutput,
    OutOfBlocks,
    PagedKVError,
    RequestForgotten,
    UnknownSequence,
)

__version__ = "0.1.0"

if TYPE_CHECKING:  # what `__getattr__` loads, as type checkers should see it
    from paged_kv.attention import KVStorage, paged_decode, paged_prefill
    from paged_kv.serving import Engine, ModelConfig, SamplingParams, TinyLM, load_tiny_lm

# Core names whose modules import torch: loaded when first asked for, so the cache chapters
# start fast.
_TORCH_NAMES = {
    "Engine": "paged_kv.serving",
    "SamplingParams": "paged_kv.serving",
    "TinyLM": "paged_kv.serving",
    "ModelConfig": "paged_kv.serving",
    "load_tiny_lm": "paged_kv.serving",
    "KVStorage": "paged_kv.attention",
    "paged_decode": "paged_kv.attention",
    "paged_prefill": "paged_kv.attention",
}


def __getattr__(name: str) -> Any:
    if name in _TORCH_NAMES:
        return getattr(importlib.import_module(_TORCH_NAMES[name]), name)
    raise AttributeError(f"module 'paged_kv' has no attribute {name!r}")


__all__ = [
    "FIFO",
    "LFU",
    "LRU",
    "AgingLFU",
    "BlockInfo",
    "BlockPool",
    "BlockState",
    "CacheBusy",
    "DuplicateSequence",
    "Engine",
    "EngineBusy",
    "EvictionPolicy",
    "InvalidArgument",
    "InvalidBlock",
    "InvalidModelOutput",
    "KVCacheManager",
    "KVStorage",
    "ModelConfig",
    "OutOfBlocks",
    "PagedKVError",
    "PoolSnapshot",
    "RequestForgotten",
    "SamplingParams",
    "TinyLM",
    "UnknownSequence",
    "UsageStats",
    "__version__",
    "load_tiny_lm",
    "paged_decode",
    "paged_prefill",
]
