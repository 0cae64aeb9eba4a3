"""A Triton kernel for paged decode attention: split-K (flash-decoding) with a log-sum-exp merge.

Each program takes one sequence, one KV head with all the query heads that share it (GQA),
and one slice of the sequence. It walks its slice in tiles of tokens, loading each token's
key and value through the block table (masked, so ragged lengths and any block size work),
and keeps a running max and sum (online softmax). The slices' partial results are merged
with their log-sum-exps. On CPU the kernel runs under TRITON_INTERPRET=1 (tests only).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from paged_kv.attention.reference import merge_partials

TILE = 16  # tokens per tile; tl.dot needs every dimension >= 16


@triton.jit
def _partial_kernel(
    q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, out_ptr, lse_ptr,
    scale,
    stride_qb, stride_qh,
    stride_kn, stride_kt, stride_kh,
    stride_tb,
    stride_ob, stride_oh, stride_os,
    stride_lb, stride_lh,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, SPLIT_LEN: tl.constexpr, TILE_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(lens_ptr + b)
    start = split * SPLIT_LEN
    end = tl.minimum(start + SPLIT_LEN, seq_len)

    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, HEAD_DIM)
    heads = kv_head * GROUP + g
    q = tl.load(
        q_ptr + b * stride_qb + heads[:, None] * stride_qh + d[None, :],
        mask=(g < GROUP)[:, None], other=0.0,
    ).to(tl.float32)  # fmt: skip

    m = tl.full((GROUP_PAD,), float("-inf"), tl.float32)
    l = tl.zeros((GROUP_PAD,), tl.float32)  # noqa: E741
    acc = tl.zeros((GROUP_PAD, HEAD_DIM), tl.float32)
    for tile_start in range(start, end, TILE_N):
        pos = tile_start + tl.arange(0, TILE_N)
        valid = pos < end
        block = tl.load(table_ptr + b * stride_tb + pos // BLOCK_SIZE, mask=valid, other=0)
        row = block * stride_kn + (pos % BLOCK_SIZE) * stride_kt + kv_head * stride_kh
        k = tl.load(k_ptr + row[:, None] + d[None, :], mask=valid[:, None], other=0.0)
        v = tl.load(v_ptr + row[:, None] + d[None, :], mask=valid[:, None], other=0.0)
        scores = tl.dot(q, tl.trans(k.to(tl.float32)), input_precision=DOT_PRECISION) * scale
        scores = tl.where(valid[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(scores - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)  # noqa: E741
        acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32), input_precision=DOT_PRECISION)
        m = m_new

    empty = l == 0.0  # a slice past the end of the sequence contributes nothing
    out = tl.where(empty[:, None], 0.0, acc / tl.where(empty, 1.0, l)[:, None])
    lse = tl.where(empty, float("-inf"), m + tl.log(tl.where(empty, 1.0, l)))
    mask_g = g < GROUP
    tl.store(
        out_ptr + b * stride_ob + heads[:, None] * stride_oh + split * stride_os + d[None, :],
        out, mask=mask_g[:, None],
    )  # fmt: skip
    tl.store(lse_ptr + b * stride_lb + heads * stride_lh + split, lse, mask=mask_g)


def dot_precision(cache_dtype: torch.dtype) -> str:
    """How `tl.dot` multiplies: exact fp32 ("ieee") for an fp32 cache, whose users expect
    fp32 accuracy; TF32 tensor cores otherwise, which hold fp16/bf16 inputs exactly."""
    return "ieee" if cache_dtype == torch.float32 else "tf32"


def num_splits(batch: int, num_kv_heads: int, max_len: int, target_programs: int) -> int:
    """Split the sequence so batch x KV heads x splits fills about `target_programs` programs.

    Long sequences with a small batch need many splits to keep a GPU busy; a slice is never
    shorter than 256 tokens, so the merge stays cheap.
    """
    by_work = max(1, math.ceil(max_len / 256))
    by_occupancy = max(1, math.ceil(target_programs / (batch * num_kv_heads)))
    return min(by_work, by_occupancy)


def triton_paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
    splits: int | None = None,
) -> torch.Tensor:
    """Same contract as `paged_kv.attention.paged_decode`, computed by the Triton kernel."""
    batch, num_q_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_q_heads // num_kv_heads
    max_len = int(seq_lens.max())
    if splits is None:
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 4
        splits = num_splits(batch, num_kv_heads, max_len, 4 * sms)
    split_len = triton.cdiv(triton.cdiv(max_len, splits), TILE) * TILE
    splits = triton.cdiv(max_len, split_len)
    out = torch.empty(batch, num_q_heads, splits, head_dim, dtype=torch.float32, device=q.device)
    lse = torch.empty(batch, num_q_heads, splits, dtype=torch.float32, device=q.device)
    tables = block_tables.to(torch.int32).contiguous()
    lens = seq_lens.to(torch.int32).contiguous()
    q = q.contiguous()
    _partial_kernel[(batch, num_kv_heads, splits)](
        q, k_cache, v_cache, tables, lens, out, lse,
        scale or 1 / math.sqrt(head_dim),
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        tables.stride(0),
        out.stride(0), out.stride(1), out.stride(2),
        lse.stride(0), lse.stride(1),
        GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)), HEAD_DIM=head_dim,
        BLOCK_SIZE=block_size, SPLIT_LEN=split_len, TILE_N=TILE,
        DOT_PRECISION=dot_precision(k_cache.dtype),
    )  # fmt: skip
    return merge_partials(out, lse).to(q.dtype)
