"""The attention layer (chapter 05): the KV storage tensors and the kernels that read them
through block tables, never made contiguous.

`paged_decode` runs the Triton kernel on CUDA tensors when triton is installed, the C++ kernel
on fp32 CPU tensors when it builds, and the torch reference otherwise; `paged_prefill` handles
new tokens attending to a cached prefix.
"""

from __future__ import annotations

import importlib.util

import torch

from paged_kv.attention.cpu_decode import cpu_paged_decode, handles
from paged_kv.attention.flashinfer import to_flashinfer
from paged_kv.attention.reference import paged_prefill, reference_decode
from paged_kv.attention.storage import KVStorage, gather_kv, write_kv

HAS_TRITON = importlib.util.find_spec("triton") is not None


def paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """Decode attention for a batch: q [batch, q_heads, dim] -> [batch, q_heads, dim].

    See `reference_decode` for the shapes; the Triton kernel is used on CUDA when available,
    the C++ kernel (`cpu_decode`) for fp32 on CPU when it builds.
    """
    if q.is_cuda and HAS_TRITON:
        from paged_kv.attention.triton_decode import triton_paged_decode

        return triton_paged_decode(q, k_cache, v_cache, block_tables, seq_lens, scale)
    if handles(q, k_cache, v_cache):
        return cpu_paged_decode(q, k_cache, v_cache, block_tables, seq_lens, scale)
    return reference_decode(q, k_cache, v_cache, block_tables, seq_lens, scale)


__all__ = [
    "HAS_TRITON",
    "KVStorage",
    "gather_kv",
    "paged_decode",
    "paged_prefill",
    "reference_decode",
    "to_flashinfer",
    "write_kv",
]
