"""The Triton prefill kernel (new tokens over a cached prefix) equals the torch reference and
dense causal attention: interpreted on CPU in one fresh process, native on CUDA."""

import os
import subprocess
import sys

import pytest
import torch

from paged_kv.attention import HAS_TRITON

pytestmark = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (extra: triton)")

INTERPRETED = """
import torch
from paged_kv.attention import paged_prefill, reference_prefill
from paged_kv.attention.testing import dense_attention
from paged_kv.attention.triton_prefill import triton_paged_prefill

gen = torch.Generator().manual_seed(0)
f32, f16 = torch.float32, torch.float16
cases = [  # block_size, q_heads, kv_heads, head_dim, seq_len, cached, dtype
    (1, 4, 2, 16, 37, 20, f32),  # block size 1: one lookup per key
    (16, 8, 2, 40, 70, 33, f32),  # head_dim 40 padded to 64; a prefix hit of 33 tokens
    (64, 4, 4, 16, 150, 64, f32),  # whole tiles; two query tiles, several key tiles
    (4, 2, 1, 8, 5, 4, f32),  # one new token after a full-prompt hit
    (32, 4, 1, 16, 100, 0, f16),  # no prefix at all: plain causal prefill
    (7, 6, 2, 24, 90, 45, f16),
]
for block_size, hq, hkv, d, seq_len, cached, dtype in cases:
    q_all = torch.randn(seq_len, hq, d, generator=gen).to(dtype)
    k = torch.randn(seq_len, hkv, d, generator=gen).to(dtype)
    v = torch.randn(seq_len, hkv, d, generator=gen).to(dtype)
    nb = -(-seq_len // block_size)
    table = torch.randperm(nb + 3, generator=gen)[:nb]
    k_cache = torch.full((nb + 3, block_size, hkv, d), float("nan"), dtype=dtype)
    v_cache = torch.full((nb + 3, block_size, hkv, d), float("nan"), dtype=dtype)
    for t in range(seq_len):
        k_cache[table[t // block_size], t % block_size] = k[t]
        v_cache[table[t // block_size], t % block_size] = v[t]
    new = q_all[cached:]
    if cached % 2:
        out = paged_prefill(new, k_cache, v_cache, table, seq_len, backend="triton")
    else:
        out = triton_paged_prefill(new, k_cache, v_cache, table, seq_len)
    assert out.dtype == dtype and out.shape == new.shape and not out.isnan().any()
    want = dense_attention(q_all, k, v, causal_offset=0)[cached:]
    ref = reference_prefill(new, k_cache, v_cache, table, seq_len)
    scale = want.abs().max()
    err = ((out.double() - want).abs().max() / scale).item()
    gap = ((out.double() - ref.double()).abs().max() / scale).item()
    limit = 1e-5 if dtype == f32 else 1e-2
    assert err < limit and gap < limit, (block_size, d, seq_len, cached, dtype, err, gap)
print("ok", len(cases))
"""


def test_interpreted_prefill_matches_the_reference_and_dense_attention():
    result = subprocess.run(
        [sys.executable, "-c", INTERPRETED],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok 6"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("dtype, atol", [(torch.float16, 5e-3), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("head_dim", [64, 80, 128, 256])
@pytest.mark.parametrize("block_size", [1, 16, 64])
def test_cuda_prefill_uses_the_kernel_and_matches_the_reference(dtype, atol, head_dim, block_size):
    from paged_kv.attention import paged_prefill, prefill_backend, reference_prefill

    gen = torch.Generator().manual_seed(3)
    seq_len, cached, hq, hkv = 300, 170, 8, 2
    nb = -(-seq_len // block_size)
    k_cache = torch.randn(nb + 4, block_size, hkv, head_dim, generator=gen).to(dtype).cuda()
    v_cache = torch.randn(nb + 4, block_size, hkv, head_dim, generator=gen).to(dtype).cuda()
    table = torch.randperm(nb + 4, generator=gen)[:nb].cuda()
    q = torch.randn(seq_len - cached, hq, head_dim, generator=gen).to(dtype).cuda()
    assert prefill_backend(q, k_cache, v_cache) == "triton"
    out = paged_prefill(q, k_cache, v_cache, table, seq_len).float()
    want = reference_prefill(q, k_cache, v_cache, table, seq_len).float()
    assert torch.allclose(out, want, atol=atol)
