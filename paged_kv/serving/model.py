"""A Llama-style decoder whose attention writes and reads the paged KV cache.

RMSNorm, rotary embeddings, grouped-query attention and a SwiGLU MLP, with Hugging Face's
Llama parameter names so `hf.from_hf` copies weights over. `forward_dense` is the cache-free
oracle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from paged_kv.attention import paged_decode, paged_prefill
from paged_kv.attention.storage import KVStorage
from paged_kv.errors import InvalidArgument
from paged_kv.validation import require_positive_int

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
DecodeAttention = Callable[..., torch.Tensor]
"""`fn(q, k_cache, v_cache, block_tables, seq_lens) -> out`, as `paged_decode`."""


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a Llama-style model. The defaults make a 0.1M-parameter byte-level toy."""

    vocab_size: int = 256
    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 16
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    attention_bias: bool = False  # biases on the q/k/v projections (Qwen2 has them)
    tie_word_embeddings: bool = False

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers"):
            require_positive_int(name, getattr(self, name))
        for name in ("num_heads", "num_kv_heads", "head_dim"):
            require_positive_int(name, getattr(self, name))
        if self.num_heads % self.num_kv_heads:
            raise InvalidArgument(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads}): each KV head serves a whole group of query heads."
            )
        if self.head_dim % 2:
            raise InvalidArgument(f"head_dim must be even for rotary embeddings: {self.head_dim}.")


class SeqChunk(NamedTuple):
    """One sequence's share of a step: its new tokens from position `start`, where they go."""

    token_ids: list[int]
    start: int
    slots: list[int]
    block_table: list[int]


@dataclass(frozen=True)
class ForwardBatch:
    """The new tokens of many sequences flattened into one list, with what attention needs.

    Sequences with one new token (decoding) attend together in one `paged_decode` call; the
    others (prefills) attend through `paged_prefill`, each to its cached prefix plus itself.
    """

    token_ids: torch.Tensor  # [N]
    positions: torch.Tensor  # [N]
    slots: torch.Tensor  # [N]
    seq_lens: torch.Tensor  # [S]: each sequence's length after this step
    block_tables: torch.Tensor  # [S, max_blocks], padded with 0
    decode_rows: torch.Tensor  # rows of the tokens that are decodes
    decode_seqs: torch.Tensor  # and their sequences
    prefill_spans: list[tuple[int, int, int]]  # (sequence, first row, end row)
    last_rows: torch.Tensor  # [S]: the row of each sequence's last new token

    @classmethod
    def build(cls, chunks: Sequence[SeqChunk], device: torch.device | str = "cpu") -> ForwardBatch:
        """Flatten `chunks` (one per sequence, each with at least one token) into a batch."""
        if not chunks or any(not c.token_ids for c in chunks):
            raise InvalidArgument("a forward batch needs at least one token for every sequence.")
        width = max(len(c.block_table) for c in chunks)
        rows, decode_rows, decode_seqs, spans, last_rows = 0, [], [], [], []
        for i, chunk in enumerate(chunks):
            n = len(chunk.token_ids)
            if n == 1:
                decode_rows.append(rows)
                decode_seqs.append(i)
            else:
                spans.append((i, rows, rows + n))
            rows += n
            last_rows.append(rows - 1)

        def tensor(values: list[int] | list[list[int]]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.long, device=device)

        return cls(
            token_ids=tensor([t for c in chunks for t in c.token_ids]),
            positions=tensor([c.start + j for c in chunks for j in range(len(c.token_ids))]),
            slots=tensor([s for c in chunks for s in c.slots]),
            seq_lens=tensor([c.start + len(c.token_ids) for c in chunks]),
            block_tables=tensor(
                [c.block_table + [0] * (width - len(c.block_table)) for c in chunks]
            ),
            decode_rows=tensor(decode_rows),
            decode_seqs=tensor(decode_seqs),
            prefill_spans=spans,
            last_rows=tensor(last_rows),
        )


def attend_paged(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    kv: KVStorage,
    layer: int,
    batch: ForwardBatch,
    decode: DecodeAttention = paged_decode,
) -> torch.Tensor:
    """Write the new tokens' K/V into the cache, then let each query attend through its table.

    Every write of the layer happens before any read, so sequences admitted in the same step
    can share prefix blocks that one of them is filling right now. Decodes attend through
    `decode` (yours, in the course's capstone), prefills through `paged_prefill`.
    """
    kv.write(layer, batch.slots, k, v)
    k_cache, v_cache = kv.k[layer], kv.v[layer]
    out = torch.empty_like(q)
    if len(batch.decode_rows):
        seqs = batch.decode_seqs
        out[batch.decode_rows] = decode(
            q[batch.decode_rows], k_cache, v_cache, batch.block_tables[seqs], batch.seq_lens[seqs]
        )
    for seq, start, end in batch.prefill_spans:
        out[start:end] = paged_prefill(
            q[start:end], k_cache, v_cache, batch.block_tables[seq], int(batch.seq_lens[seq])
        )
    return out


def attend_dense(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Plain causal attention over one whole sequence, q/k/v [T, heads, dim]: no cache at all."""
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None],
        k.transpose(0, 1)[None],
        v.transpose(0, 1)[None],
        is_causal=True,
        enable_gqa=True,
    )
    return out[0].transpose(0, 1)


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in fp32 (as Llama does)."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (i, i + dim/2) of every head by its position's angles (Llama's layout)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """Grouped-query self-attention; *how* keys and values are stored is the `attend` argument."""

    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.shape = (c.num_heads, c.num_kv_heads, c.head_dim)
        self.q_proj = nn.Linear(c.hidden_size, c.num_heads * c.head_dim, bias=c.attention_bias)
        self.k_proj = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=c.attention_bias)
        self.v_proj = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=c.attention_bias)
        self.o_proj = nn.Linear(c.num_heads * c.head_dim, c.hidden_size, bias=False)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend: Attend
    ) -> torch.Tensor:
        heads, kv_heads, dim = self.shape
        n = x.shape[0]
        q = apply_rope(self.q_proj(x).view(n, heads, dim), cos, sin)
        k = apply_rope(self.k_proj(x).view(n, kv_heads, dim), cos, sin)
        v = self.v_proj(x).view(n, kv_heads, dim)
        return self.o_proj(attend(q, k, v).reshape(n, heads * dim))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm residual block: attention, then the MLP."""

    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend: Attend
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, attend)
        return x + self.mlp(self.post_attention_layernorm(x))


class TinyLM(nn.Module):
    """A Llama-style causal LM. `forward` runs an engine step on the paged cache;
    `forward_dense` runs one whole sequence with no cache (the reference)."""

    inv_freq: torch.Tensor  # a buffer (register_buffer below), not a parameter

    def __init__(self, config: ModelConfig | None = None, *, seed: int = 0) -> None:
        super().__init__()
        c = self.config = config or ModelConfig()
        with torch.random.fork_rng(devices=[]):  # same weights for the same seed, always
            torch.manual_seed(seed)
            self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
            self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.num_layers))
            self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
            self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        if c.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        exponents = torch.arange(0, c.head_dim, 2, dtype=torch.float32) / c.head_dim
        self.register_buffer("inv_freq", c.rope_theta**-exponents, persistent=False)
        self.attention_scaling = 1.0  # rope variants such as YaRN scale cos and sin
        self.eos_token_ids: tuple[int, ...] = ()
        """Tokens that end a request unless its `SamplingParams(ignore_eos=True)`: none here;
        `from_hf` sets the Hugging Face model's."""

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    def kv_storage(self, num_blocks: int, block_size: int) -> KVStorage:
        """An empty paged KV cache shaped for this model, on its device and in its dtype."""
        c = self.config
        return KVStorage(
            c.num_layers,
            num_blocks,
            block_size,
            c.num_kv_heads,
            c.head_dim,
            dtype=self.dtype,
            device=self.device,
        )

    @torch.no_grad()
    def forward(
        self, batch: ForwardBatch, kv: KVStorage, decode: DecodeAttention = paged_decode
    ) -> torch.Tensor:
        """Write the batch's K/V into `kv`; return the logits of each sequence's last new
        token, [num_sequences, vocab_size]. Decodes attend through `decode`."""
        hidden = self.run_layers(
            batch.token_ids,
            batch.positions,
            lambda layer: partial(attend_paged, kv=kv, layer=layer, batch=batch, decode=decode),
        )
        return self.lm_head(self.norm(hidden[batch.last_rows]))

    @torch.no_grad()
    def forward_dense(self, token_ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
        """Logits for every position of one sequence, [T, vocab_size], without any cache."""
        ids = torch.as_tensor(token_ids, dtype=torch.long, device=self.device)
        positions = torch.arange(len(ids), device=self.device)
        return self.lm_head(self.norm(self.run_layers(ids, positions, lambda _: attend_dense)))

    def run_layers(
        self,
        token_ids: torch.Tensor,
        positions: torch.Tensor,
        attend_for: Callable[[int], Attend],
    ) -> torch.Tensor:
        """The decoder stack's hidden states [N, hidden]; `attend_for(layer)` is the attention
        of that layer, and so decides where its K/V are kept (paged, contiguous, nowhere)."""
        x = self.embed_tokens(token_ids)
        cos, sin = self._rope(positions)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, attend_for(i))
        return x

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of each position's angles, [N, 1, head_dim] (one row for all heads)."""
        angles = positions[:, None].float() * self.inv_freq[None, :]
        angles = torch.cat((angles, angles), dim=-1)[:, None, :]
        scale = self.attention_scaling
        return (angles.cos() * scale).to(self.dtype), (angles.sin() * scale).to(self.dtype)


def parameter_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The name and shape of every tensor in `TinyLM(config).state_dict()`, computed without
    building the model (a weights file is checked against it before anything is allocated).
    Its cost grows with `config.num_layers`: bound that first."""
    c = config
    h, i = c.hidden_size, c.intermediate_size
    layer: dict[str, tuple[int, ...]] = {"input_layernorm.weight": (h,)}
    for proj, rows in (("q", c.num_heads), ("k", c.num_kv_heads), ("v", c.num_kv_heads)):
        layer[f"self_attn.{proj}_proj.weight"] = (rows * c.head_dim, h)
        if c.attention_bias:
            layer[f"self_attn.{proj}_proj.bias"] = (rows * c.head_dim,)
    layer |= {
        "self_attn.o_proj.weight": (h, c.num_heads * c.head_dim),
        "post_attention_layernorm.weight": (h,),
        "mlp.gate_proj.weight": (i, h),
        "mlp.up_proj.weight": (i, h),
        "mlp.down_proj.weight": (h, i),
    }
    shapes = {"embed_tokens.weight": (c.vocab_size, h)}
    for n in range(c.num_layers):
        shapes |= {f"layers.{n}.{name}": shape for name, shape in layer.items()}
    return shapes | {"norm.weight": (h,), "lm_head.weight": (c.vocab_size, h)}


def greedy_dense(model: TinyLM, prompt: Sequence[int], max_new_tokens: int) -> list[int]:
    """Greedy decoding with no cache at all: rerun the whole sequence for every new token.

    Quadratic and slow, and therefore the reference the paged engine must match exactly.
    """
    tokens = list(prompt)
    for _ in range(max_new_tokens):
        tokens.append(int(model.forward_dense(tokens)[-1].argmax()))
    return tokens[len(prompt) :]
