"""KV storage: the tensors that hold every block's keys and values, one pair per layer.

Layout per layer: [num_blocks, block_size, num_kv_heads, head_dim] for K and for V (the
"NHD" layout of FlashInfer and vLLM's Triton path). Tokens are written by slot mapping.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from paged_kv.cache.block_table import blocks_needed
from paged_kv.errors import InvalidArgument, InvalidBlock
from paged_kv.validation import require_int, require_positive_int


class KVStorage:
    """K and V caches for `num_layers` layers over `num_blocks` blocks of `block_size` tokens."""

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> None:
        for name, value in [
            ("num_layers", num_layers),
            ("num_blocks", num_blocks),
            ("block_size", block_size),
            ("num_kv_heads", num_kv_heads),
            ("head_dim", head_dim),
        ]:
            require_positive_int(name, value)
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        self.block_size = block_size
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]

    @property
    def num_blocks(self) -> int:
        return self.k[0].shape[0]

    def write(
        self, layer: int, slots: Sequence[int] | torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        """Store K/V rows [n, num_kv_heads, head_dim] at flat `slots`; a slot of -1 is skipped."""
        write_kv(self.k[layer], self.v[layer], slots, k, v)

    def copy_blocks(self, copies: Sequence[tuple[int, int]]) -> None:
        """Perform copy-on-write copies (source block, destination block) in every layer."""
        if not copies:
            return
        src = torch.tensor([s for s, _ in copies], dtype=torch.long, device=self.k[0].device)
        dst = torch.tensor([d for _, d in copies], dtype=torch.long, device=self.k[0].device)
        for cache in (*self.k, *self.v):
            cache[dst] = cache[src]

    def gather(
        self, layer: int, block_table: Sequence[int], num_tokens: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A sequence's K and V, `[num_tokens, num_kv_heads, head_dim]`, read through its table.

        `InvalidArgument` for a layer or a length the table cannot hold, `InvalidBlock` for a
        block id the sequence uses that is not one of the cache's."""
        if not 0 <= require_int("layer", layer) < len(self.k):
            raise InvalidArgument(f"layer {layer} is not one of this storage's {len(self.k)}.")
        table = torch.as_tensor(block_table, dtype=torch.long, device=self.k[layer].device)
        num_blocks, block_size = self.k[layer].shape[:2]
        if table.dim() != 1 or not 0 <= require_int("num_tokens", num_tokens) <= (
            table.shape[0] * block_size
        ):
            raise InvalidArgument(
                f"a table of {table.shape[0]} block(s) of {block_size} holds 0.."
                f"{table.shape[0] * block_size} tokens, not {num_tokens}; pass the sequence's "
                "own block table and length."
            )
        used = table[: blocks_needed(num_tokens, block_size)]
        if len(used) and not (int(used.min()) >= 0 and int(used.max()) < num_blocks):
            raise InvalidBlock(f"the table uses a block outside the cache's 0..{num_blocks - 1}.")
        return gather_kv(self.k[layer], self.v[layer], table, num_tokens)


def gather_kv(
    k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor, num_tokens: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence's K and V, [num_tokens, num_kv_heads, head_dim], read through its table.

    Only the blocks the sequence uses are read, and only its tokens kept: whatever sits in
    the rest of the cache (even NaN) cannot reach the result.
    """
    blocks = block_table[: blocks_needed(num_tokens, k_cache.shape[1])].long()
    return (
        k_cache.index_select(0, blocks).flatten(0, 1)[:num_tokens],
        v_cache.index_select(0, blocks).flatten(0, 1)[:num_tokens],
    )


def write_kv(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: Sequence[int] | torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
) -> None:
    """Write row i of k and v at flat slot slots[i] (block slot // block_size, offset
    slot % block_size) of one layer's caches; slots of -1 (padding) are skipped."""
    slots = torch.as_tensor(slots, dtype=torch.long, device=k_cache.device)
    row = tuple(k_cache.shape[2:])
    if k.shape != v.shape or tuple(k.shape) != (slots.shape[0], *row):
        raise InvalidArgument(
            f"write needs k and v of shape {(slots.shape[0], *row)} (one row per slot); "
            f"got {tuple(k.shape)} and {tuple(v.shape)}."
        )
    keep = slots >= 0
    capacity = k_cache.shape[0] * k_cache.shape[1]
    if bool((slots[keep] >= capacity).any()):
        raise InvalidArgument(f"a slot is beyond the {capacity} slots of this cache.")
    k_cache.view(-1, *row)[slots[keep]] = k[keep].to(k_cache.dtype)
    v_cache.view(-1, *row)[slots[keep]] = v[keep].to(v_cache.dtype)
