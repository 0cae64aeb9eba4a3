"""The argument check every paged-attention backend runs before it reads the cache.

A length or a block id a kernel trusts blindly reads the wrong memory: rows never written (one
length for three sequences), another sequence's K/V (a length beyond its table), or outside the
cache, where torch raises a bare `IndexError` and a GPU kernel reads whatever lies there. So
each backend's public entry (`reference_decode`, `paged_prefill`, `cpu_paged_decode`, the
Triton and flex ones) calls `check_decode_args` / `check_prefill_args` first, and a bad call
is an `InvalidArgument` (shapes, lengths) or an `InvalidBlock` (a block id) naming the culprit.
Every argument must already be a tensor (a list or a numpy array of block ids is refused with
the `torch.tensor(...)` call to make instead: converting it here would hide a host-to-device
copy in every decode step), and the tables must live on the caches' device.

The value checks are two min/max reductions read with one small copy to the host (on CUDA,
the one synchronisation of a decode call); a table entry out of range (padding the lengths do
not reach, maybe) costs a closer look.
"""

from __future__ import annotations

import torch

from paged_kv.errors import InvalidArgument, InvalidBlock
from paged_kv.validation import as_int

_INTEGER_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def check_decode_args(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
) -> None:
    """Raise unless q [batch, q_heads, head_dim], caches [blocks, block_size, kv_heads,
    head_dim], block_tables [batch, width] and seq_lens [batch] (integers) agree, every length
    is in 0..width * block_size, and every block a sequence uses is a block of the cache."""
    check_caches(q, k_cache, v_cache)
    _require_tensor(
        "block_tables",
        block_tables,
        "[batch, max_blocks] of block ids",
        "torch.tensor(block_tables, dtype=torch.int32, device=k_cache.device), rows padded to "
        "one width",
    )
    _require_tensor(
        "seq_lens", seq_lens, "[batch] of lengths", "torch.tensor(seq_lens, dtype=torch.int32)"
    )
    _require_on_cache_device("block_tables", block_tables, k_cache)
    batch = q.shape[0]
    if block_tables.dim() != 2 or block_tables.shape[0] != batch:
        raise InvalidArgument(
            f"block_tables must be [batch={batch}, max_blocks], got {tuple(block_tables.shape)}."
        )
    if seq_lens.dim() != 1 or seq_lens.shape[0] != batch:
        raise InvalidArgument(
            f"seq_lens must hold one length per query ({batch}), got shape {tuple(seq_lens.shape)}."
        )
    for name, t in (("block_tables", block_tables), ("seq_lens", seq_lens)):
        if t.dtype not in _INTEGER_DTYPES:
            raise InvalidArgument(f"{name} must be an integer tensor, got {t.dtype}.")
    if batch:
        _check_values(block_tables, seq_lens, k_cache.shape[0], k_cache.shape[1])


def check_prefill_args(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_len: object,
) -> int:
    """`seq_len` as an int, if q [new, q_heads, head_dim] holds the last 1..seq_len tokens of
    a sequence whose table [blocks] covers seq_len tokens with blocks of the cache; else raise."""
    check_caches(q, k_cache, v_cache)
    _require_tensor(
        "block_table",
        block_table,
        "[blocks] of block ids",
        "torch.tensor(block_table, dtype=torch.int32, device=k_cache.device)",
    )
    _require_on_cache_device("block_table", block_table, k_cache)
    length = as_int(seq_len)
    num_new = q.shape[0]
    if length is None or not 0 < num_new <= length:
        raise InvalidArgument(f"need 0 < new tokens ({num_new}) <= seq_len ({seq_len!r}).")
    if block_table.dim() != 1 or block_table.dtype not in _INTEGER_DTYPES:
        raise InvalidArgument(
            f"block_table must be one sequence's table, a 1-D integer tensor; got "
            f"{tuple(block_table.shape)} {block_table.dtype}."
        )
    lens = torch.tensor([length], device=block_table.device)
    _check_values(block_table[None], lens, k_cache.shape[0], k_cache.shape[1])
    return length


def check_caches(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> int:
    """The query group size, if q and the caches are tensors on one device with the shapes
    attention takes; else raise."""
    _require_tensor("q", q, "[n, q_heads, head_dim]", "torch.as_tensor(q)")
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        shape = "[blocks, block_size, kv_heads, head_dim]"
        _require_tensor(name, cache, shape, f"torch.as_tensor({name})")
    if not q.device == k_cache.device == v_cache.device:
        raise InvalidArgument(
            f"q, k_cache and v_cache must be on one device, got {q.device}, {k_cache.device} "
            f"and {v_cache.device}; move them with .to(k_cache.device)."
        )
    if q.dim() != 3 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise InvalidArgument(
            "shapes: q [n, q_heads, head_dim], k_cache and v_cache [blocks, block_size, "
            f"kv_heads, head_dim]; got {tuple(q.shape)}, {tuple(k_cache.shape)}, "
            f"{tuple(v_cache.shape)}."
        )
    if q.shape[-1] != k_cache.shape[-1]:
        raise InvalidArgument(
            f"q's head_dim ({q.shape[-1]}) differs from the cache's ({k_cache.shape[-1]})."
        )
    return group_size(q.shape[1], k_cache.shape[2])


def _require_tensor(name: str, value: object, what: str, make: str) -> None:
    """Raise unless `value` is a torch.Tensor; the message says how to make one."""
    if not isinstance(value, torch.Tensor):
        raise InvalidArgument(
            f"{name} must be a torch.Tensor ({what}), got {type(value).__name__}; pass {make}."
        )


def _require_on_cache_device(name: str, table: torch.Tensor, k_cache: torch.Tensor) -> None:
    """Raise unless `table` is on the caches' device (a kernel reads it there)."""
    if table.device != k_cache.device:
        raise InvalidArgument(
            f"{name} is on {table.device} but the caches are on {k_cache.device}; pass "
            f"{name}.to({str(k_cache.device)!r})."
        )


def group_size(num_q_heads: int, num_kv_heads: int) -> int:
    """Query heads per KV head (grouped-query attention); raise unless it is whole."""
    if num_q_heads % num_kv_heads:
        raise InvalidArgument(
            f"num_q_heads ({num_q_heads}) must be a multiple of num_kv_heads ({num_kv_heads})."
        )
    return num_q_heads // num_kv_heads


def _check_values(
    tables: torch.Tensor, seq_lens: torch.Tensor, num_blocks: int, block_size: int
) -> None:
    """Lengths within each table, and the blocks they use within the cache. The bounds of the
    lengths and of the whole tables come to the host in one copy; only a table entry out of
    range (padding, maybe) costs a closer look at the entries the lengths use."""
    width = tables.shape[1]
    capacity = width * block_size
    lens = seq_lens.to(device=tables.device, dtype=torch.int64)
    shortest, longest, lowest, highest = torch.stack(
        (*torch.aminmax(lens), *torch.aminmax(tables.long()))
    ).tolist()
    if shortest < 0 or longest > capacity:
        b = int(((lens < 0) | (lens > capacity)).nonzero()[0, 0])
        raise InvalidArgument(
            f"sequence {b} has length {int(lens[b])}, but its table of {width} block(s) of "
            f"{block_size} holds 0..{capacity} tokens."
        )
    if lowest >= 0 and highest < num_blocks:
        return
    blocks_used = (lens + block_size - 1).div(block_size, rounding_mode="floor")
    used = torch.arange(width, device=tables.device) < blocks_used.unsqueeze(1)
    foreign = (used & ((tables < 0) | (tables >= num_blocks))).nonzero()
    if len(foreign):
        b, i = (int(x) for x in foreign[0])
        raise InvalidBlock(
            f"sequence {b} uses block id {int(tables[b, i])} (table entry {i}), but the cache "
            f"has blocks 0..{num_blocks - 1}."
        )
