"""Helpers for testing attention: a dense reference and random paged batches.

Shared by the library's tests and the chapter-05 checks, so both compare against one oracle.
"""

from __future__ import annotations

import math

import torch

from paged_kv.cache.block_table import blocks_needed


def dense_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal_offset: int | None = None
) -> torch.Tensor:
    """float64 softmax(q k^T / sqrt(d)) v with GQA; q [n, Hq, D], k/v [T, Hkv, D]."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("nhd,thd->hnt", q, k) / math.sqrt(q.shape[-1])
    if causal_offset is not None:
        n, t = q.shape[0], k.shape[0]
        future = torch.arange(t)[None, :] > (causal_offset + torch.arange(n))[:, None]
        scores = scores.masked_fill(future, float("-inf"))
    return torch.einsum("hnt,thd->nhd", torch.softmax(scores, dim=-1), v)


def random_paged_batch(
    gen: torch.Generator,
    batch: int,
    block_size: int,
    num_kv_heads: int,
    group: int,
    head_dim: int,
    dtype: torch.dtype = torch.float32,
) -> tuple:
    """Sequences of random lengths in shuffled blocks; every unused slot holds NaN."""
    lens = torch.randint(1, 5 * block_size + 3, (batch,), generator=gen)
    blocks_per_seq = [blocks_needed(int(n), block_size) for n in lens]
    num_blocks = sum(blocks_per_seq) + 3
    order = torch.randperm(num_blocks, generator=gen).tolist()  # non-contiguous, non-monotone
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=dtype)
    v_cache = torch.full(shape, float("nan"), dtype=dtype)
    tables = torch.full((batch, max(blocks_per_seq)), -1, dtype=torch.int32)
    dense = []
    for b, (n, nb) in enumerate(zip(lens.tolist(), blocks_per_seq, strict=True)):
        table = [order.pop() for _ in range(nb)]
        tables[b, :nb] = torch.tensor(table)
        k = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
        v = torch.randn(n, num_kv_heads, head_dim, generator=gen).to(dtype)
        for t in range(n):
            k_cache[table[t // block_size], t % block_size] = k[t]
            v_cache[table[t // block_size], t % block_size] = v[t]
        dense.append((k, v))
    q = torch.randn(batch, num_kv_heads * group, head_dim, generator=gen).to(dtype)
    return q, k_cache, v_cache, tables, lens, dense
