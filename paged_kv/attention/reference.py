"""The torch reference of paged attention: gather blocks through the table, then attend.

Runs on any device, accumulates in fp32, and is the oracle the kernels are tested against.
Grouped-query attention: query head h reads KV head h // (num_q_heads // num_kv_heads).
"""

from __future__ import annotations

import math

import torch

from paged_kv.errors import InvalidArgument


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
    batch, num_q_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    group = _group(num_q_heads, num_kv_heads)
    k, v, valid = _gather(k_cache, v_cache, block_tables, seq_lens)  # [B, T, Hkv, D], [B, T]
    qg = q.float().view(batch, num_kv_heads, group, head_dim)
    scores = torch.einsum("bhgd,bthd->bhgt", qg, k) * (scale or 1 / math.sqrt(head_dim))
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    out = torch.einsum("bhgt,bthd->bhgd", torch.softmax(scores, dim=-1), v)
    return out.reshape(batch, num_q_heads, head_dim).to(q.dtype)


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
    num_new, num_q_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    group = _group(num_q_heads, num_kv_heads)
    if not 0 < num_new <= seq_len:
        raise InvalidArgument(f"need 0 < new tokens ({num_new}) <= seq_len ({seq_len}).")
    lens = torch.tensor([seq_len], device=q.device)
    k, v, _ = _gather(k_cache, v_cache, block_table[None], lens)
    k, v = k[0, :seq_len], v[0, :seq_len]  # [T, Hkv, D]
    qg = q.float().view(num_new, num_kv_heads, group, head_dim)
    scores = torch.einsum("nhgd,thd->hgnt", qg, k) * (scale or 1 / math.sqrt(head_dim))
    positions = torch.arange(seq_len - num_new, seq_len, device=q.device)
    future = torch.arange(seq_len, device=q.device)[None, :] > positions[:, None]  # [n, T]
    scores = scores.masked_fill(future, float("-inf"))
    out = torch.einsum("hgnt,thd->nhgd", torch.softmax(scores, dim=-1), v)
    return out.reshape(num_new, num_q_heads, head_dim).to(q.dtype)


def _group(num_q_heads: int, num_kv_heads: int) -> int:
    if num_q_heads % num_kv_heads:
        raise InvalidArgument(
            f"num_q_heads ({num_q_heads}) must be a multiple of num_kv_heads ({num_kv_heads})."
        )
    return num_q_heads // num_kv_heads


def _gather(
    k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor, seq_lens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """K/V of every sequence laid out contiguously ([B, T, Hkv, D], fp32) and a validity mask.

    Positions past a sequence's length are zeroed, so garbage there (even NaN) cannot leak.
    """
    batch, max_blocks = block_tables.shape
    block_size = k_cache.shape[1]
    tables = block_tables.long().clamp(min=0)
    k = k_cache[tables].reshape(batch, max_blocks * block_size, *k_cache.shape[2:]).float()
    v = v_cache[tables].reshape(batch, max_blocks * block_size, *v_cache.shape[2:]).float()
    valid = torch.arange(max_blocks * block_size, device=k.device)[None, :] < seq_lens[:, None]
    zero = torch.zeros((), device=k.device)
    k = torch.where(valid[:, :, None, None], k, zero)
    v = torch.where(valid[:, :, None, None], v, zero)
    return k, v, valid
