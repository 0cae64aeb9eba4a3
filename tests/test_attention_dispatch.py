"""Which path `paged_decode` / `paged_prefill` take, and the refusals of a forced backend.

CUDA-looking calls are asked of the chooser with meta tensors and device="cuda": shapes and
strides without memory, so the GPU rule is tested on any machine.
"""

import pytest
import torch

import paged_kv.attention as attention
from paged_kv import InvalidArgument
from paged_kv.attention import (
    decode_backend,
    paged_decode,
    paged_prefill,
    prefill_backend,
    reference_decode,
    reference_prefill,
)
from paged_kv.attention.cpu_decode import built_library
from paged_kv.attention.testing import random_paged_batch

needs_cpp = pytest.mark.skipif(built_library() is None, reason="the C++ kernel did not build")


def meta(dtype=torch.float16, head_dim=128, block_size=16, group=4, kv_heads=8):
    """q and caches of a GPU-sized call, as meta tensors (nothing is allocated)."""
    q = torch.empty(64, kv_heads * group, head_dim, dtype=dtype, device="meta")
    cache = torch.empty(4096, block_size, kv_heads, head_dim, dtype=dtype, device="meta")
    return q, cache, cache


@pytest.mark.skipif(not attention.HAS_TRITON, reason="triton is not installed")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("head_dim", [8, 40, 64, 80, 96, 112, 128, 160, 256])
@pytest.mark.parametrize("block_size, group", [(1, 1), (16, 4), (7, 16), (256, 8), (32, 40)])
def test_cuda_calls_of_every_model_head_dim_go_to_triton(dtype, head_dim, block_size, group):
    call = meta(dtype, head_dim, block_size, group)
    assert decode_backend(*call, device="cuda") == "triton"
    assert prefill_backend(*call, device="cuda") == "triton"


@pytest.mark.parametrize(
    "call, why",
    [
        (meta(head_dim=20), "multiple of 8"),
        (meta(head_dim=512), "up to 256"),
        (meta(dtype=torch.float64), "fp32, fp16 or bf16"),
        ((meta()[0].float(), *meta()[1:]), "share one dtype"),
    ],
)
def test_cuda_calls_the_kernels_cannot_take_go_to_the_reference(call, why):
    from paged_kv.attention.triton_shapes import triton_refusal

    assert decode_backend(*call, device="cuda") == "reference"
    assert prefill_backend(*call, device="cuda") == "reference"
    assert why in triton_refusal(*call, device="cuda")


def test_unaligned_or_strided_caches_go_to_the_reference():
    q, _, _ = meta(head_dim=64)
    pool = torch.empty(2, 4096, 16, 8, 68, dtype=torch.float16, device="meta")
    padded = pool[0, ..., :64]  # rows of 68 elements: strides not multiples of 8
    assert decode_backend(q, padded, padded, device="cuda") == "reference"
    kv = torch.empty(4096, 2, 16, 8, 64, dtype=torch.float16, device="meta")
    k, v = kv[:, 0], kv[:, 1]  # K and V interleaved per block: strided, but aligned
    assert decode_backend(q, k, v, device="cuda") == "triton"


def test_without_triton_cuda_calls_go_to_the_reference(monkeypatch):
    monkeypatch.setattr(attention, "HAS_TRITON", False)
    assert decode_backend(*meta(), device="cuda") == "reference"
    with pytest.raises(InvalidArgument, match="triton is not installed"):
        attention._chosen("triton", "decode", *meta())


@needs_cpp
def test_cpu_fp32_decode_goes_to_the_cpp_kernel_and_the_rest_to_the_reference():
    gen = torch.Generator().manual_seed(0)
    q, k_cache, v_cache, tables, lens, _ = random_paged_batch(gen, 3, 16, 2, 4, 32)
    assert decode_backend(q, k_cache, v_cache) == "cpu"
    assert prefill_backend(q, k_cache, v_cache) == "reference"
    half = [t.half() for t in (q, k_cache, v_cache)]
    assert decode_backend(*half) == "reference"
    auto = paged_decode(q, k_cache, v_cache, tables, lens)
    assert torch.equal(auto, paged_decode(q, k_cache, v_cache, tables, lens, backend="cpu"))
    ref = paged_decode(q, k_cache, v_cache, tables, lens, backend="reference")
    assert torch.equal(ref, reference_decode(q, k_cache, v_cache, tables, lens))
    assert torch.allclose(auto, ref, atol=1e-5)


def test_a_backend_that_cannot_take_the_call_is_refused_with_the_reason(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    gen = torch.Generator().manual_seed(1)
    q, k_cache, v_cache, tables, lens, _ = random_paged_batch(gen, 2, 4, 2, 2, 16, torch.float16)
    args = (q, k_cache, v_cache, tables, lens)
    if attention.HAS_TRITON:
        with pytest.raises(InvalidArgument, match=r"TRITON_INTERPRET=1.*backend=None"):
            paged_decode(*args, backend="triton")
    with pytest.raises(InvalidArgument, match=r"fp32 only.*'reference'"):
        paged_decode(*args, backend="cpu")
    with pytest.raises(InvalidArgument, match=r"no C\+\+ prefill kernel"):
        paged_prefill(q, k_cache, v_cache, tables[0], int(lens[0]), backend="cpu")
    with pytest.raises(InvalidArgument, match=r"None \(auto\), 'triton', 'cpu' or 'reference'"):
        paged_decode(*args, backend="cuda")
    with pytest.raises(InvalidArgument, match="multiple"):  # shapes first, for any backend
        paged_decode(q[:, :3], k_cache, v_cache, tables, lens, backend="cpu")  # 3 over 2


def test_prefill_reference_backend_is_the_reference():
    gen = torch.Generator().manual_seed(2)
    _, k_cache, v_cache, tables, lens, _ = random_paged_batch(gen, 1, 4, 2, 2, 16)
    n = int(lens[0])
    new = torch.randn(min(n, 3), 4, 16, generator=gen)
    out = paged_prefill(new, k_cache, v_cache, tables[0], n, backend="reference")
    assert torch.equal(out, reference_prefill(new, k_cache, v_cache, tables[0], n))
    assert torch.equal(out, paged_prefill(new, k_cache, v_cache, tables[0], n))
