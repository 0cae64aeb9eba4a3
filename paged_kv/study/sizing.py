"""How many bytes the KV cache needs: per token, per block, for real model shapes.

Every layer stores one key and one value vector per KV head per token, so a token costs
2 * layers * kv_heads * head_dim * bytes_per_element.
"""

from __future__ import annotations

from dataclasses import dataclass

from paged_kv.validation import require_positive_int


@dataclass(frozen=True)
class ModelShape:
    """The dimensions of a decoder that decide its KV-cache size."""

    name: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int = 2  # fp16 / bf16

    def __post_init__(self) -> None:
        for field in ("num_layers", "num_kv_heads", "head_dim", "dtype_bytes"):
            require_positive_int(field, getattr(self, field))

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V for one token across all layers."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    def kv_bytes_per_block(self, block_size: int) -> int:
        """Bytes of one block of `block_size` tokens."""
        return require_positive_int("block_size", block_size) * self.kv_bytes_per_token

    def tokens_that_fit(self, kv_budget_bytes: int) -> int:
        """How many tokens' K/V fit in `kv_budget_bytes`."""
        return kv_budget_bytes // self.kv_bytes_per_token


# Published configurations (layers, KV heads, head dim), fp16.
KNOWN_MODELS: dict[str, ModelShape] = {
    m.name: m
    for m in (
        ModelShape("OPT-13B", 40, 40, 128),
        ModelShape("Llama-2-7B", 32, 32, 128),
        ModelShape("Llama-2-13B", 40, 40, 128),
        ModelShape("Llama-2-70B (GQA)", 80, 8, 128),
        ModelShape("Llama-3-8B (GQA)", 32, 8, 128),
        ModelShape("Mistral-7B (GQA)", 32, 8, 128),
    )
}
