"""A Triton kernel for prefill over a cached prefix: FlashAttention-2's loop, keys read through
the block table.

After a prefix-cache hit, a sequence's first `seq_len - num_new` tokens are already in the cache
and only the last `num_new` are computed. Their K/V have been written too, so every key the new
tokens attend to sits in the cache: query i (at position prefix + i) sees keys 0..prefix + i.
Each program takes a tile of new tokens for one query head and walks the keys in tiles through
the table. Keys before the tile's first query are visible to all its rows and need no causal
mask; only the last few key tiles (the diagonal) are masked. Softmax runs online, in base 2.
fp16/bf16 dots run on tensor cores in the cache's dtype (P is rounded to it for the second dot,
as FlashAttention does: prefill does enough arithmetic per byte for that to matter); fp32 caches
get exact fp32 dots.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from paged_kv.attention.checks import check_prefill_args, group_size
from paged_kv.attention.triton_decode import LOG2_E, Launch, dot_precision
from paged_kv.attention.triton_shapes import (
    block_class,
    head_dim_width,
    num_stages,
    num_warps,
    prefill_tiles,
    triton_refusal,
)
from paged_kv.errors import InvalidArgument

_PREFILL_INTS = [
    "head_dim8", "group", "num_new", "seq_len", "block_size",
    "stride_kn8", "stride_kt8", "stride_kh8",
]  # fmt: skip


@triton.jit
def _key_tile(
    q, acc, m, l, qpos, start, table_ptr, k_head, v_head, d, d_ok,  # noqa: E741
    qk_scale, block_size, stride_kn, stride_kt, key_end,
    BLOCK_N: tl.constexpr, WHOLE_TILES: tl.constexpr, CAUSAL: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """Fold keys start..start+BLOCK_N (those < key_end) into the online softmax of the rows."""
    offs = tl.arange(0, BLOCK_N)
    kpos = start + offs
    valid = kpos < key_end
    if WHOLE_TILES:
        block = tl.load(table_ptr + start // block_size).to(tl.int64)
        row = block * stride_kn + (start % block_size + offs) * stride_kt
    else:
        block = tl.load(table_ptr + kpos // block_size, mask=valid, other=0).to(tl.int64)
        row = block * stride_kn + (kpos % block_size) * stride_kt
    mask = valid[:, None] & d_ok[None, :]
    k = tl.load(k_head + row[:, None] + d[None, :], mask=mask, other=0.0)
    v = tl.load(v_head + row[:, None] + d[None, :], mask=mask, other=0.0)
    scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
    visible = valid[None, :]
    if CAUSAL:
        visible = visible & (kpos[None, :] <= qpos[:, None])
    scores = tl.where(visible, scores, float("-inf"))
    m_new = tl.maximum(m, tl.max(scores, axis=1))
    alpha = tl.exp2(m - m_new)
    p = tl.exp2(scores - m_new[:, None])
    l = l * alpha + tl.sum(p, axis=1)  # noqa: E741
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    return acc, m_new, l


@triton.jit(
    do_not_specialize=_PREFILL_INTS,
    do_not_specialize_on_alignment=["q_ptr", "table_ptr", "out_ptr"],
)
def _prefill_kernel(
    q_ptr, k_ptr, v_ptr, table_ptr, out_ptr,
    qk_scale,  # softmax scale * log2(e)
    head_dim8, group, num_new, seq_len, block_size,
    stride_kn8, stride_kt8, stride_kh8,
    WIDTH: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    WHOLE_TILES: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    tile = tl.program_id(0)
    head = tl.program_id(1)
    num_q_heads = tl.num_programs(1)
    kv_head = head // group
    head_dim = head_dim8 * 8
    stride_kn, stride_kt = stride_kn8 * 8, stride_kt8 * 8
    prefix = seq_len - num_new

    i = tile * BLOCK_M + tl.arange(0, BLOCK_M)  # index among the new tokens
    i_ok = i < num_new
    qpos = prefix + i
    d = tl.arange(0, WIDTH)
    d_ok = d < head_dim
    io = (i * num_q_heads + head)[:, None] * head_dim + d[None, :]
    io_mask = i_ok[:, None] & d_ok[None, :]
    q = tl.load(q_ptr + io, mask=io_mask, other=0.0)
    k_head = k_ptr + kv_head * stride_kh8 * 8
    v_head = v_ptr + kv_head * stride_kh8 * 8

    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l = tl.zeros((BLOCK_M,), tl.float32)  # noqa: E741
    acc = tl.zeros((BLOCK_M, WIDTH), tl.float32)
    first = prefix + tile * BLOCK_M  # the tile's first query position
    key_end = tl.minimum(first + BLOCK_M, seq_len)  # no row of the tile sees a key past this
    full_end = first // BLOCK_N * BLOCK_N  # keys before it are seen by every row
    for start in range(0, full_end, BLOCK_N):
        acc, m, l = _key_tile(  # noqa: E741
            q, acc, m, l, qpos, start, table_ptr, k_head, v_head, d, d_ok,
            qk_scale, block_size, stride_kn, stride_kt, key_end,
            BLOCK_N, WHOLE_TILES, False, DOT_PRECISION,  # type: ignore[arg-type]  # triton: a literal for a constexpr
        )  # fmt: skip
    for start in range(full_end, key_end, BLOCK_N):
        acc, m, l = _key_tile(  # noqa: E741
            q, acc, m, l, qpos, start, table_ptr, k_head, v_head, d, d_ok,
            qk_scale, block_size, stride_kn, stride_kt, key_end,
            BLOCK_N, WHOLE_TILES, True, DOT_PRECISION,  # type: ignore[arg-type]  # triton: a literal for a constexpr
        )  # fmt: skip
    out = acc / tl.where(l == 0.0, 1.0, l)[:, None]
    tl.store(out_ptr + io, out.to(out_ptr.dtype.element_ty), mask=io_mask)


def plan_prefill(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_len: int,
    scale: float | None = None,
) -> tuple[list[Launch], torch.Tensor]:
    """The launch of a prefill call and the output it fills."""
    num_new, num_q_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    group = group_size(num_q_heads, num_kv_heads)
    if not 0 < num_new <= seq_len:
        raise InvalidArgument(f"need 0 < new tokens ({num_new}) <= seq_len ({seq_len}).")
    if v_cache.stride() != k_cache.stride():
        raise InvalidArgument(
            f"k_cache and v_cache need equal strides: {k_cache.stride()} vs {v_cache.stride()}."
        )
    width = head_dim_width(head_dim)
    block_m, block_n = prefill_tiles(k_cache.dtype, width)
    q = q.contiguous()
    table = block_table.to(torch.int32).contiguous()
    out = torch.empty_like(q)
    scale = scale if scale is not None else 1 / math.sqrt(head_dim)
    stride_kn, stride_kt, stride_kh, _ = k_cache.stride()
    launch = Launch(
        _prefill_kernel,
        (triton.cdiv(num_new, block_m), num_q_heads),
        (
            q,
            k_cache,
            v_cache,
            table,
            out,
            scale * LOG2_E,
            head_dim // 8,
            group,
            num_new,
            seq_len,
            block_size,
            stride_kn // 8,
            stride_kt // 8,
            stride_kh // 8,
        ),
        dict(
            WIDTH=width,
            BLOCK_M=block_m,
            BLOCK_N=block_n,
            WHOLE_TILES=block_class("prefill", k_cache.dtype, width, block_size) == "whole",
            DOT_PRECISION=dot_precision(k_cache.dtype),  # fp16/bf16 dots ignore it
            num_warps=num_warps("prefill", k_cache.dtype, width),
            num_stages=num_stages("prefill", k_cache.dtype, width),
            enable_fp_fusion=True,  # multiply-adds fused (pinned: Triton 3.10 changes the default)
        ),
    )
    return [launch], out


def triton_paged_prefill(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_len: int,
    scale: float | None = None,
) -> torch.Tensor:
    """Same contract as `paged_kv.attention.paged_prefill`, computed by the Triton kernel.

    The table must hold the sequence's first ceil(seq_len / block_size) blocks, all blocks
    of the cache (`check_prefill_args`). Raises `InvalidArgument` for a call the kernel cannot
    take.
    """
    reason = triton_refusal(q, k_cache, v_cache)
    if reason is not None:
        raise InvalidArgument(f"the Triton prefill kernel cannot take this call: {reason}.")
    seq_len = check_prefill_args(q, k_cache, v_cache, block_table, seq_len)
    launches, out = plan_prefill(q, k_cache, v_cache, block_table, seq_len, scale)
    for launch in launches:
        launch.kernel[launch.grid](*launch.args, **launch.constants)
    return out
