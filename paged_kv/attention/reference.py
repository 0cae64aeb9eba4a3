"""The torch reference of paged attention: gather a sequence's blocks, then attend (matmuls).

Runs on any device, computes in fp32, and is the oracle the kernels are tested against.
Grouped-query attention: query head h reads KV head h // (num_q_heads // num_kv_heads).
"""

from __future__ import annotations

import math

import torch

from paged_kv.attention.checks import check_decode_args, check_prefill_args
from paged_kv.attention.storage import gather_kv


def reference_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """One query token per sequence attends to its first `seq_lens[b]` cached tokens.

    q: [batch, num_q_heads, head_dim]; k_cache, v_cache: [num_blocks, block_size,
    num_kv_heads, head_dim]; block_tables: [batch, max_blocks] (entries past a sequence's
    blocks are ignored); seq_lens: [batch]. Returns [batch, num_q_heads, head_dim].
    """
    check_decode_args(q, k_cache, v_cache, block_tables, seq_lens)
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for b, length in enumerate(seq_lens.tolist()):
        k, v = gather_kv(k_cache, v_cache, block_tables[b], length)
        out[b] = _attend(q[b : b + 1], k, v, scale, mask=None)[0]
    return out.to(q.dtype)


def paged_prefill(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_len: int,
    scale: float | None = None,
) -> torch.Tensor:
    """The last `q.shape[0]` tokens of a `seq_len`-token sequence attend causally.

    Their K/V are already written; the tokens before them (a prefix-cache hit) are read
    from the cache. q: [num_new, num_q_heads, head_dim]; block_table: [num_blocks_of_seq].
    Returns [num_new, num_q_heads, head_dim].
    """
    seq_len = check_prefill_args(q, k_cache, v_cache, block_table, seq_len)
    num_new = q.shape[0]
    k, v = gather_kv(k_cache, v_cache, block_table, seq_len)
    positions = torch.arange(seq_len - num_new, seq_len, device=q.device)
    visible = torch.arange(seq_len, device=q.device)[None, :] <= positions[:, None]  # [n, T]
    return _attend(q, k, v, scale, mask=visible).to(q.dtype)


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None,
    mask: torch.Tensor | None,
) -> torch.Tensor:
    """softmax(q k^T * scale) v in fp32 with grouped KV heads; q [n, Hq, D], k/v [T, Hkv, D].

    Two batched matmuls, one per KV head: the rows are the n tokens x G query heads sharing it.
    """
    n, num_q_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    group = num_q_heads // num_kv_heads
    rows = q.float().view(n, num_kv_heads, group, head_dim).transpose(0, 1)
    rows = rows.reshape(num_kv_heads, n * group, head_dim)  # [Hkv, n*G, D]
    scores = rows @ k.float().permute(1, 2, 0)  # [Hkv, n*G, T]
    scores *= scale if scale is not None else 1 / math.sqrt(head_dim)
    if mask is not None:
        scores.masked_fill_(~mask.repeat_interleave(group, dim=0), float("-inf"))
    out = scores.softmax(dim=-1) @ v.float().transpose(0, 1)  # [Hkv, n*G, D]
    return out.view(num_kv_heads, n, group, head_dim).transpose(0, 1).reshape(q.shape)


def merge_partials(out: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """Combine per-slice softmax results: weight each by exp(its log-sum-exp - the total's).

    out: [..., splits, head_dim] (each slice normalised by its own sum); lse: [..., splits].
    """
    total = torch.logsumexp(lse, dim=-1, keepdim=True)
    weights = torch.exp(lse - total).nan_to_num(0.0)
    return (weights[..., None] * out).sum(dim=-2)
