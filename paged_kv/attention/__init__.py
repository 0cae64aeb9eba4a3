"""The attention layer (chapter 05): the KV storage tensors and the kernels that read them
through block tables, never made contiguous.

`paged_decode` and `paged_prefill` dispatch: with `backend=None` (auto) decode runs the Triton
kernels on CUDA tensors they take, the C++ kernel on fp32 CPU tensors when it builds, and the
torch reference otherwise; prefill runs the Triton kernel on CUDA, the reference otherwise.
`decode_backend` / `prefill_backend` say which path auto takes; asking for a backend that
cannot take a call raises `InvalidArgument` with the reason. When auto falls back to the
reference although the device has a fast kernel, a `SlowPathWarning` says why, once per
process and reason (`slow_path.py`).
"""

from __future__ import annotations

import importlib.util

import torch

from paged_kv.attention.checks import check_caches
from paged_kv.attention.cpu_decode import LANES, cpu_paged_decode, handles
from paged_kv.attention.flashinfer import to_flashinfer
from paged_kv.attention.reference import paged_prefill as reference_prefill
from paged_kv.attention.reference import reference_decode
from paged_kv.attention.slow_path import SlowPathWarning, warn_slow_path
from paged_kv.attention.storage import KVStorage, gather_kv, write_kv
from paged_kv.attention.triton_shapes import triton_refusal
from paged_kv.errors import InvalidArgument

HAS_TRITON = importlib.util.find_spec("triton") is not None
BACKENDS = ("triton", "cpu", "reference")
_FAST_KERNELS = {
    ("decode", "cpu"): "cpu",
    ("decode", "cuda"): "triton",
    ("prefill", "cuda"): "triton",
}
"""(op, device type) -> the kernel auto dispatch prefers there; elsewhere the reference is all."""
_NOT_BUILT = "the C++ kernel did not build here (no C++ compiler?)"  # `_kernel()` warned already


def _refusal(
    backend: str,
    op: str,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    device: str | None = None,
) -> str | None:
    """Why `backend` cannot run `op` ("decode" or "prefill") on these tensors; None if it can."""
    device = device or q.device.type
    if backend == "reference":
        return None
    if backend == "triton":
        if not HAS_TRITON:
            return "triton is not installed (pip install 'paged_kv[triton]', Linux)"
        return triton_refusal(q, k_cache, v_cache, device)
    if op == "prefill":
        return "there is no C++ prefill kernel"
    tensors = (q, k_cache, v_cache)
    if device != "cpu":
        return f"the tensors are on {device}; the C++ kernel runs on the CPU"
    if any(t.dtype != torch.float32 for t in tensors):
        return "the C++ kernel takes fp32 only (pass q and the caches as float32)"
    if q.dim() != 3 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        return (
            "shapes: q [batch, q_heads, head_dim], caches [blocks, block_size, kv_heads, head_dim]"
        )
    if q.shape[-1] != k_cache.shape[-1] or q.shape[-1] % LANES:
        return (
            f"head_dim {q.shape[-1]} is not a multiple of {LANES} (or q's differs from the cache's)"
        )
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        return (
            "the caches are not contiguous (K and V interleaved in one tensor, say): keep K "
            "and V in tensors of their own, or pass k_cache.contiguous() and "
            "v_cache.contiguous() (two copies every call)"
        )
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return "a gradient is wanted; the kernel has no backward (use torch.no_grad())"
    if not handles(q, k_cache, v_cache):
        return _NOT_BUILT
    return None


def decode_backend(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, *, device: str | None = None
) -> str:
    """The path `paged_decode(..., backend=None)` takes: "triton", "cpu" or "reference".

    `device` overrides the tensors' device type, to ask what a call of these shapes would do
    elsewhere (e.g. meta tensors with device="cuda": nothing is allocated or launched).
    """
    device = device or q.device.type
    if device == "cuda" and _refusal("triton", "decode", q, k_cache, v_cache, device) is None:
        return "triton"
    if device == "cpu" and _refusal("cpu", "decode", q, k_cache, v_cache, device) is None:
        return "cpu"
    return "reference"


def prefill_backend(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, *, device: str | None = None
) -> str:
    """The path `paged_prefill(..., backend=None)` takes: "triton" or "reference"."""
    device = device or q.device.type
    if device == "cuda" and _refusal("triton", "prefill", q, k_cache, v_cache, device) is None:
        return "triton"
    return "reference"


def _chosen(backend: str | None, op: str, q, k_cache, v_cache) -> str:
    """The backend to run: auto's choice, or the one asked for if it can take the call."""
    choose = decode_backend if op == "decode" else prefill_backend
    if backend is None:
        chosen = choose(q, k_cache, v_cache)
        if chosen == "reference":
            _tell_slow_path(op, q, k_cache, v_cache)
        return chosen
    if backend not in BACKENDS:
        raise InvalidArgument(
            f"backend must be None (auto), 'triton', 'cpu' or 'reference'; got {backend!r}."
        )
    reason = _refusal(backend, op, q, k_cache, v_cache)
    if reason is not None:
        raise InvalidArgument(
            f"backend={backend!r} cannot take this {op} call: {reason}. Pass backend=None to "
            f"choose automatically ({choose(q, k_cache, v_cache)!r} here) or 'reference' (any "
            "device and dtype)."
        )
    return backend


def _tell_slow_path(op: str, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    """Auto took the reference: if the device has a fast kernel, warn (once) why it refused."""
    kernel = _FAST_KERNELS.get((op, q.device.type))
    reason = None if kernel is None else _refusal(kernel, op, q, k_cache, v_cache)
    if kernel is not None and reason is not None and reason != _NOT_BUILT:
        warn_slow_path(op, "C++" if kernel == "cpu" else "Triton", reason, stacklevel=4)


def paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
    *,
    backend: str | None = None,
) -> torch.Tensor:
    """Decode attention for a batch: q [batch, q_heads, dim] -> [batch, q_heads, dim].

    See `reference_decode` for the shapes. `backend`: None (auto, see `decode_backend`),
    "triton" (CUDA; the CPU too under TRITON_INTERPRET=1), "cpu" (the C++ kernel) or "reference".
    Each backend checks the call first (`checks.check_decode_args`): bad shapes or lengths
    raise `InvalidArgument`, a block id outside the cache `InvalidBlock`; every argument is a
    tensor (a list of block ids is `InvalidArgument`, naming the `torch.tensor` call to make),
    the tables on the caches' device. Auto falling back to the reference on a device with a
    fast kernel (a non-contiguous cache on the CPU, say) warns once why (`SlowPathWarning`).
    """
    check_caches(q, k_cache, v_cache)  # shapes first, whatever the backend
    chosen = _chosen(backend, "decode", q, k_cache, v_cache)
    if chosen == "triton":
        from paged_kv.attention.triton_decode import triton_paged_decode

        return triton_paged_decode(q, k_cache, v_cache, block_tables, seq_lens, scale)
    if chosen == "cpu":
        return cpu_paged_decode(q, k_cache, v_cache, block_tables, seq_lens, scale)
    return reference_decode(q, k_cache, v_cache, block_tables, seq_lens, scale)


def paged_prefill(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_len: int,
    scale: float | None = None,
    *,
    backend: str | None = None,
) -> torch.Tensor:
    """The last `q.shape[0]` tokens of a `seq_len`-token sequence attend causally to it.

    See `reference.paged_prefill` for the shapes. `backend`: None (auto, see `prefill_backend`),
    "triton" (CUDA; the CPU too under TRITON_INTERPRET=1) or "reference".
    """
    check_caches(q, k_cache, v_cache)  # shapes first, whatever the backend
    if _chosen(backend, "prefill", q, k_cache, v_cache) == "triton":
        from paged_kv.attention.triton_prefill import triton_paged_prefill

        return triton_paged_prefill(q, k_cache, v_cache, block_table, seq_len, scale)
    return reference_prefill(q, k_cache, v_cache, block_table, seq_len, scale)


__all__ = [
    "BACKENDS",
    "HAS_TRITON",
    "KVStorage",
    "SlowPathWarning",
    "decode_backend",
    "gather_kv",
    "paged_decode",
    "paged_prefill",
    "prefill_backend",
    "reference_decode",
    "reference_prefill",
    "to_flashinfer",
    "write_kv",
]
