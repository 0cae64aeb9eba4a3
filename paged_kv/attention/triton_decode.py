"""A Triton kernel for paged decode attention: split-K (flash-decoding) with a log-sum-exp merge.

Each program takes one sequence, one KV head with up to 16 of the query heads that share it
(GQA; a larger group takes several programs), and one slice of the sequence. It walks its
slice in tiles of tokens, loading each tile's keys and values through the block table (masked,
so ragged lengths, any block size and a head dimension padded to a power of two all work), and
keeps a running max and sum (online softmax, in base 2: `exp2` is the GPU's native exponential).
A second, small kernel merges the slices by their log-sum-exps and writes q's dtype.

Which compiled variant a call needs is decided in `triton_shapes` (dtype, padded head dimension,
block-size class); every size, stride and length is a runtime argument Triton does not
specialise on, so that set is finite and compiled ahead of time for GPU targets (triton_aot.py,
run by tests/test_triton_aot.py and tools/triton_aot_report.py).
On CPU the kernels run under TRITON_INTERPRET=1 (tests only).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl

from paged_kv.attention.checks import check_decode_args, group_size
from paged_kv.attention.triton_shapes import (
    ROWS,
    block_class,
    decode_tile,
    head_dim_width,
    num_stages,
    num_warps,
    triton_refusal,
)
from paged_kv.errors import InvalidArgument

LOG2_E = 1.4426950408889634

# Sizes, lengths and strides vary from call to call: Triton must not compile a variant for
# each value (nor for "divisible by 16" or "equal to 1"). Alignment comes from the classes:
# strides arrive divided by 8 and are multiplied back in the kernel, which tells the compiler
# that every K/V row starts on a multiple of 8 elements (16 bytes in fp16: vector loads).
_DECODE_INTS = [
    "head_dim8", "group", "chunks", "block_size", "split_len", "num_splits",
    "stride_kn8", "stride_kt8", "stride_kh8", "stride_tb",
]  # fmt: skip
_SMALL_POINTERS = ["q_ptr", "table_ptr", "lens_ptr", "out_ptr", "lse_ptr"]


@triton.jit(do_not_specialize=_DECODE_INTS, do_not_specialize_on_alignment=_SMALL_POINTERS)
def _partial_kernel(
    q_ptr, k_ptr, v_ptr, table_ptr, lens_ptr, out_ptr, lse_ptr,
    qk_scale,  # softmax scale * log2(e)
    head_dim8, group, chunks, block_size, split_len, num_splits,
    stride_kn8, stride_kt8, stride_kh8, stride_tb,
    WIDTH: tl.constexpr, ROWS: tl.constexpr, TILE_N: tl.constexpr,
    WHOLE_TILES: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0)
    kv_head = tl.program_id(1) // chunks
    chunk = tl.program_id(1) % chunks
    split = tl.program_id(2)
    num_q_heads = tl.num_programs(1) // chunks * group
    head_dim = head_dim8 * 8
    stride_kn, stride_kt = stride_kn8 * 8, stride_kt8 * 8

    g = chunk * ROWS + tl.arange(0, ROWS)  # this program's rows of the group
    row_ok = g < group
    heads = kv_head * group + g
    d = tl.arange(0, WIDTH)
    d_ok = d < head_dim  # the padding columns are never loaded nor stored
    seq_len = tl.load(lens_ptr + b)
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)

    q_rows = (b * num_q_heads + heads) * head_dim
    q = tl.load(
        q_ptr + q_rows[:, None] + d[None, :], mask=row_ok[:, None] & d_ok[None, :], other=0.0
    ).to(tl.float32)
    table = table_ptr + b * stride_tb
    k_head = k_ptr + kv_head * stride_kh8 * 8
    v_head = v_ptr + kv_head * stride_kh8 * 8

    m = tl.full((ROWS,), float("-inf"), tl.float32)
    l = tl.zeros((ROWS,), tl.float32)  # noqa: E741
    acc = tl.zeros((ROWS, WIDTH), tl.float32)
    for tile_start in range(start, end, TILE_N):
        offs = tl.arange(0, TILE_N)
        pos = tile_start + offs
        valid = pos < end
        if WHOLE_TILES:  # the tile lies inside one block: one table lookup
            block = tl.load(table + tile_start // block_size).to(tl.int64)
            row = block * stride_kn + (tile_start % block_size + offs) * stride_kt
        else:  # one lookup per token
            block = tl.load(table + pos // block_size, mask=valid, other=0).to(tl.int64)
            row = block * stride_kn + (pos % block_size) * stride_kt
        mask = valid[:, None] & d_ok[None, :]
        k = tl.load(k_head + row[:, None] + d[None, :], mask=mask, other=0.0)
        v = tl.load(v_head + row[:, None] + d[None, :], mask=mask, other=0.0)
        scores = tl.dot(q, tl.trans(k.to(tl.float32)), input_precision=DOT_PRECISION)
        scores = tl.where(valid[None, :], scores * qk_scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(scores - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)  # noqa: E741
        acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32), input_precision=DOT_PRECISION)
        m = m_new

    empty = l == 0.0  # a slice past the end of the sequence contributes nothing
    out = acc / tl.where(empty, 1.0, l)[:, None]
    lse = tl.where(empty, float("-inf"), m + tl.log2(tl.where(empty, 1.0, l)))  # base 2
    at = (b * num_q_heads + heads) * num_splits + split
    tl.store(
        out_ptr + at[:, None] * head_dim + d[None, :], out, mask=row_ok[:, None] & d_ok[None, :]
    )
    tl.store(lse_ptr + at, lse, mask=row_ok)


@triton.jit(do_not_specialize=["head_dim8", "num_splits"])
def _merge_kernel(part_ptr, lse_ptr, out_ptr, head_dim8, num_splits, WIDTH: tl.constexpr):
    """out[b, h] = sum over slices s of 2^(lse_s - lse_total) * part[b, h, s]."""
    bh = tl.program_id(0)
    head_dim = head_dim8 * 8
    d = tl.arange(0, WIDTH)
    d_ok = d < head_dim
    m = tl.full((), float("-inf"), tl.float32)
    total = tl.full((), 0.0, tl.float32)
    acc = tl.zeros((WIDTH,), tl.float32)
    for s in range(num_splits):
        lse = tl.load(lse_ptr + bh * num_splits + s)
        part = tl.load(part_ptr + (bh * num_splits + s) * head_dim + d, mask=d_ok, other=0.0)
        m_new = tl.maximum(m, lse)
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # all slices empty so far
        alpha = tl.exp2(m - shift)
        weight = tl.exp2(lse - shift)
        total = total * alpha + weight
        acc = acc * alpha + weight * part
        m = m_new
    out = acc / tl.where(total == 0.0, 1.0, total)
    tl.store(out_ptr + bh * head_dim + d, out.to(out_ptr.dtype.element_ty), mask=d_ok)


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


class Launch(NamedTuple):
    """One kernel launch, as `kernel[grid](*args, **constants)` runs it; the ahead-of-time
    compile feeds the same arguments to Triton's binder to compile exactly this variant."""

    kernel: Any
    grid: tuple[int, ...]
    args: tuple
    constants: dict


def plan_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
    splits: int | None = None,
) -> tuple[list[Launch], torch.Tensor]:
    """The two launches of a decode call (partials, merge) and the output they fill.

    No device-to-host copy: the slices are sized from the table's width (an upper bound of
    the longest sequence), and slices past a sequence's end return at once.
    """
    batch, num_q_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    group = group_size(num_q_heads, num_kv_heads)
    chunks = triton.cdiv(group, ROWS)
    width = head_dim_width(head_dim)
    tile = decode_tile(k_cache.dtype, width)
    max_len = max(1, block_tables.shape[1] * block_size)
    if splits is None:
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 4
        splits = num_splits(batch, num_kv_heads * chunks, max_len, 4 * sms)
    split_len = triton.cdiv(triton.cdiv(max_len, splits), tile) * tile
    splits = triton.cdiv(max_len, split_len)

    device = q.device
    q = q.contiguous()
    tables = block_tables.to(torch.int32).contiguous()
    lens = seq_lens.to(device=device, dtype=torch.int32).contiguous()
    part = torch.empty(batch, num_q_heads, splits, head_dim, dtype=torch.float32, device=device)
    lse = torch.empty(batch, num_q_heads, splits, dtype=torch.float32, device=device)
    out = torch.empty(batch, num_q_heads, head_dim, dtype=q.dtype, device=device)
    scale = scale if scale is not None else 1 / math.sqrt(head_dim)
    stride_kn, stride_kt, stride_kh, _ = k_cache.stride()
    if v_cache.stride() != k_cache.stride():
        raise InvalidArgument(
            f"k_cache and v_cache need equal strides: {k_cache.stride()} vs {v_cache.stride()}."
        )
    partials = Launch(
        _partial_kernel,
        (batch, num_kv_heads * chunks, splits),
        (
            q,
            k_cache,
            v_cache,
            tables,
            lens,
            part,
            lse,
            scale * LOG2_E,
            head_dim // 8,
            group,
            chunks,
            block_size,
            split_len,
            splits,
            stride_kn // 8,
            stride_kt // 8,
            stride_kh // 8,
            tables.stride(0),
        ),
        dict(
            WIDTH=width,
            ROWS=ROWS,
            TILE_N=tile,
            WHOLE_TILES=block_class("decode", k_cache.dtype, width, block_size) == "whole",
            DOT_PRECISION=dot_precision(k_cache.dtype),
            num_warps=num_warps("decode", k_cache.dtype, width),
            num_stages=num_stages("decode", k_cache.dtype, width),
            enable_fp_fusion=True,  # multiply-adds fused (pinned: Triton 3.10 changes the default)
        ),
    )
    merge = Launch(
        _merge_kernel,
        (batch * num_q_heads,),
        (part, lse, out, head_dim // 8, splits),
        dict(WIDTH=width, num_warps=num_warps("merge", q.dtype, width), enable_fp_fusion=True),
    )
    return [partials, merge], out


def triton_paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
    splits: int | None = None,
) -> torch.Tensor:
    """Same contract as `paged_kv.attention.paged_decode`, computed by the Triton kernels.

    Raises `InvalidArgument` for a call the kernels cannot take (see
    `triton_shapes.triton_refusal`) and for lengths or block ids `check_decode_args` refuses.
    """
    reason = triton_refusal(q, k_cache, v_cache)
    if reason is not None:
        raise InvalidArgument(f"the Triton decode kernel cannot take this call: {reason}.")
    check_decode_args(q, k_cache, v_cache, block_tables, seq_lens)
    launches, out = plan_decode(q, k_cache, v_cache, block_tables, seq_lens, scale, splits)
    for launch in launches:
        launch.kernel[launch.grid](*launch.args, **launch.constants)
    return out
