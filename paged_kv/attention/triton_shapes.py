"""What the Triton kernels take, and which compiled variant ("specialisation") a call needs.

Pure Python over shapes and dtypes (triton is not imported), so the dispatcher can decide before
loading triton, and the ahead-of-time compile (tools/triton_aot_report.py, tests/test_triton_aot.py)
can list every variant the dispatcher can launch. A variant is fixed by four classes:

- **dtype** of the caches: fp32, fp16 or bf16 (q must match);
- **head-dimension width**: `head_dim` (a multiple of 8, at most 256) padded to the next power
  of two, at least 16 (`tl.arange` needs a power of two, `tl.dot` at least 16): 16, 32, 64,
  128 or 256. The true `head_dim` is a runtime argument and the padding is masked, so 40, 64
  and 48 share one binary, and 80, 96, 112, 128 another;
- **block-size class**: "whole" when the block size is a multiple of the kernel's token tile
  (each tile lies inside one block: one table lookup per tile), else "any" (one lookup per
  token, so block sizes 1, 3, 24 work too);
- **group class**: one. A program takes 16 query-head rows (the minimum of `tl.dot`) of one KV
  head; groups 1-16 fill one program, a larger group takes ceil(group / 16) programs per KV head.

Everything else (lengths, block size, group, strides, the slice length) is a runtime argument
that Triton is told not to specialise on, so the set of variants is finite: the product above.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import torch

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
HEAD_DIM_WIDTHS = (16, 32, 64, 128, 256)
BLOCK_CLASSES = ("whole", "any")
GROUP_CLASSES = ("rows16",)
MAX_HEAD_DIM = 256
HEAD_DIM_MULTIPLE = 8  # 16-byte rows for fp16/bf16: every K/V row load is vectorised
ROWS = 16  # query-head rows per decode program: tl.dot's minimum
KERNELS = ("decode", "merge", "prefill")


def head_dim_width(head_dim: int) -> int:
    """The padded width a head dimension compiles to: a power of two, at least 16."""
    return max(16, 1 << (head_dim - 1).bit_length())


def decode_tile(dtype: torch.dtype, width: int) -> int:
    """Tokens per decode tile: about 8 KB of keys per tile (as many of V), 16 to 64 tokens.

    Chosen with the ahead-of-time report: wider fp32 tiles spill registers on sm_90."""
    return max(16, min(64, 8192 // (width * dtype.itemsize)))


def prefill_tiles(dtype: torch.dtype, width: int) -> tuple[int, int]:
    """(query tokens, key tokens) per prefill tile. fp16/bf16 as FlashAttention-2 picks for 4
    warps; fp32's exact dots run on FMA units and spill at those sizes, so they get smaller."""
    if dtype == torch.float32:
        return (32, 32) if width <= 64 else (32, 16) if width <= 128 else (16, 16)
    return (64, 64) if width <= 64 else (64, 32) if width <= 128 else (32, 32)


def num_warps(kernel: str, dtype: torch.dtype, width: int) -> int:
    """Warps per program. Wide heads get 8 so the tiles fit in registers: decode at 256,
    prefill from 128 on (with 4, fp16 prefill at 128 spilled on sm_80 and fp32 on sm_90)."""
    if kernel == "merge":
        return 1 if width <= 64 else 2 if width <= 128 else 4
    return 8 if width >= (128 if kernel == "prefill" else 256) else 4


def num_stages(kernel: str, dtype: torch.dtype, width: int) -> int:
    """Software-pipelining depth (loads in flight ahead of use). Triton's default 3, except fp32
    decode: 3 stages of fp32 tiles spilled registers at widths 32 and 64."""
    return 2 if kernel == "decode" and dtype == torch.float32 else 3


def key_tile(kernel: str, dtype: torch.dtype, width: int) -> int:
    """The token tile whose multiple makes a block size "whole" for this kernel."""
    return decode_tile(dtype, width) if kernel == "decode" else prefill_tiles(dtype, width)[1]


def block_class(kernel: str, dtype: torch.dtype, width: int, block_size: int) -> str:
    return "whole" if block_size % key_tile(kernel, dtype, width) == 0 else "any"


class Variant(NamedTuple):
    """One compiled variant of one kernel: what the ahead-of-time compile enumerates."""

    kernel: str  # "decode", "merge" (split-K's log-sum-exp merge) or "prefill"
    dtype: torch.dtype
    width: int  # padded head dimension
    block_class: str  # "whole" or "any"; "-" for the merge, which reads no cache

    @property
    def name(self) -> str:
        dtype = str(self.dtype).removeprefix("torch.")
        return f"{self.kernel}/{dtype}/d{self.width}/{self.block_class}"


def all_variants() -> list[Variant]:
    """Every variant the dispatcher can launch, decode and prefill (group class: one)."""
    out = []
    for kernel, dtype, width in itertools.product(KERNELS, DTYPES, HEAD_DIM_WIDTHS):
        classes = ("-",) if kernel == "merge" else BLOCK_CLASSES
        out += [Variant(kernel, dtype, width, c) for c in classes]
    return out


def variants_for(kernel: str, dtype: torch.dtype, head_dim: int, block_size: int) -> list[Variant]:
    """The variants one call launches: decode needs its merge too."""
    width = head_dim_width(head_dim)
    if kernel == "decode":
        return [
            Variant("decode", dtype, width, block_class("decode", dtype, width, block_size)),
            Variant("merge", dtype, width, "-"),
        ]
    return [Variant("prefill", dtype, width, block_class("prefill", dtype, width, block_size))]


def triton_refusal(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, device: str | None = None
) -> str | None:
    """Why the Triton kernels cannot take this call, or None if they can.

    `device` overrides the tensors' device type (e.g. "cuda" to ask what a GPU call of these
    shapes would do; meta tensors describe shapes without memory).
    """
    device = device or q.device.type
    if device not in ("cuda", "cpu"):
        return f"the tensors are on {device}; Triton runs on CUDA (or the CPU interpreter)"
    if device == "cpu" and not _interpreting():
        return "the tensors are on the CPU; Triton runs there only with TRITON_INTERPRET=1"
    tensors = (q, k_cache, v_cache)
    if len({t.device for t in tensors}) > 1:
        return "q, k_cache and v_cache are on different devices"
    if k_cache.dtype not in DTYPES:
        return f"the cache dtype is {k_cache.dtype}; the kernels take fp32, fp16 or bf16"
    if q.dtype != k_cache.dtype or v_cache.dtype != k_cache.dtype:
        dtypes = ", ".join(str(t.dtype) for t in (q, k_cache, v_cache))
        return f"q, k_cache and v_cache must share one dtype (got {dtypes})"
    if q.dim() != 3 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        return "shapes: q [n, q_heads, head_dim], caches [blocks, block_size, kv_heads, head_dim]"
    head_dim = k_cache.shape[-1]
    if q.shape[-1] != head_dim:
        return f"q's head_dim ({q.shape[-1]}) differs from the cache's ({head_dim})"
    if head_dim % HEAD_DIM_MULTIPLE or head_dim > MAX_HEAD_DIM:
        return f"head_dim {head_dim} is not a multiple of {HEAD_DIM_MULTIPLE} up to {MAX_HEAD_DIM}"
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        if cache.stride(-1) != 1 or any(s % HEAD_DIM_MULTIPLE for s in cache.stride()[:-1]):
            return f"{name}'s strides {cache.stride()} are not (multiples of 8, ..., 1)"
        if cache.data_ptr() % 16:
            return f"{name} does not start on a 16-byte boundary"
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return "a gradient is wanted; the kernels have no backward (use torch.no_grad())"
    return None


def _interpreting() -> bool:
    import os

    return os.environ.get("TRITON_INTERPRET") == "1"
