"""Torch's own paged attention as a peer: FlexAttention over the pool, masked by the page table.

FlexAttention (`torch.nn.attention.flex_attention`) attends over a `BlockMask`: for each query
block, the list of KV blocks to visit, plus a `mask_mod(b, h, q_idx, kv_idx)` for the elements
inside them. Paging maps onto it directly (torch's experimental `PagedAttention` helper in
torch/nn/attention/experimental/_paged_attention.py does the same):

- the whole cache is one long sequence: K viewed as [1, kv_heads, num_blocks * block_size, dim]
  (a view of the NHD storage, no copy), broadcast over the batch;
- a flex KV block is a cache block (BLOCK_SIZE = block_size), and sequence b's list of blocks
  to visit is its block table: `kv_indices[b] = table[b]`, `kv_num_blocks[b]` = its blocks;
- `mask_mod` turns a physical slot back into the token's position (through the inverse of the
  table, `logical[b, block]`) and hides positions at or past `seq_lens[b]`.

Differences from `paged_decode` worth knowing: flex masks *scores*, not loads, so whatever sits
in a visited but unused slot is still multiplied by a zero weight, and a NaN there turns the
output NaN (eager flex even computes scores for the whole pool). Our kernels mask the loads.
Eager flex runs anywhere (slowly: it materialises the scores); `compiled=True` generates a fused
kernel with `torch.compile` (CPU or GPU; the first call compiles for tens of seconds).
"""

from __future__ import annotations

import functools
import warnings

import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

from paged_kv.attention.checks import check_decode_args

Q_BLOCK = 128  # flex's default query block; a decode step has one query per sequence


def paged_block_mask(
    block_tables: torch.Tensor, seq_lens: torch.Tensor, num_blocks: int, block_size: int
) -> BlockMask:
    """A BlockMask for one query per sequence over a pool of `num_blocks` blocks.

    `block_tables` [batch, max_blocks] (entries past a sequence's blocks are ignored),
    `seq_lens` [batch]. Built once per batch layout; reusable across layers.
    """
    device = block_tables.device
    batch, width = block_tables.shape
    lens = seq_lens.to(device=device, dtype=torch.int64)
    used = -(-lens // block_size)  # blocks per sequence
    live = torch.arange(width, device=device)[None, :] < used[:, None]
    tables = torch.where(live, block_tables.long(), 0)
    logical = torch.full((batch, num_blocks), -1, dtype=torch.int64, device=device)
    rows = torch.arange(batch, device=device)[:, None].expand(-1, width)
    positions = torch.arange(width, device=device)[None, :].expand(batch, -1)
    logical[rows[live], tables[live]] = positions[live]

    def mask_mod(b, h, q_idx, kv_idx):
        block = logical[b, kv_idx // block_size]
        position = block * block_size + kv_idx % block_size
        return (block >= 0) & (position < lens[b])

    kv_indices = torch.zeros(batch, 1, 1, num_blocks, dtype=torch.int32, device=device)
    kv_indices[:, 0, 0, :width] = tables.to(torch.int32)
    return BlockMask.from_kv_blocks(
        used.to(torch.int32)[:, None, None],
        kv_indices,
        BLOCK_SIZE=(Q_BLOCK, block_size),
        mask_mod=mask_mod,
        seq_lengths=(1, num_blocks * block_size),
    )


@functools.cache
def _compiled_flex():
    return torch.compile(flex_attention, dynamic=False)


def flex_paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
    *,
    block_mask: BlockMask | None = None,
    compiled: bool = False,
) -> torch.Tensor:
    """`paged_decode`'s contract computed by FlexAttention (see the module docstring).

    Pass `block_mask` (from `paged_block_mask`) to reuse one across calls; `compiled=True`
    runs `torch.compile(flex_attention)`.
    """
    check_decode_args(q, k_cache, v_cache, block_tables, seq_lens)
    num_blocks, block_size, num_kv_heads, head_dim = k_cache.shape
    if block_mask is None:
        block_mask = paged_block_mask(block_tables, seq_lens, num_blocks, block_size)
    pool = (1, num_blocks * block_size, num_kv_heads, head_dim)
    k = k_cache.view(pool).transpose(1, 2)  # [1, kv_heads, slots, dim], no copy
    v = v_cache.view(pool).transpose(1, 2)
    attend = _compiled_flex() if compiled else flex_attention
    with warnings.catch_warnings():  # eager on purpose: no notice that compiling is faster
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        out = attend(q[:, :, None], k, v, block_mask=block_mask, scale=scale, enable_gqa=True)
    return out[:, :, 0]
