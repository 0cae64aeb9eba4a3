"""The Triton decode kernels equal the dense reference: interpreted on CPU, native on CUDA.

TRITON_INTERPRET must be set before triton is imported, so the CPU checks run in one fresh
Python process; tiny shapes keep the interpreter fast. The cases cover every head-dimension
width (8 -> 16, 24 -> 32, 40 -> 64, 80 -> 128; 256 itself is compiled ahead of time, see
test_triton_aot.py), both block-size classes, groups from 1 to past 16, several slices, and
fp32/fp16 (the interpreter has no bf16).
"""

import os
import subprocess
import sys

import pytest
import torch

from paged_kv.attention import HAS_TRITON

pytestmark = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (extra: triton)")

INTERPRETED = """
import torch
from paged_kv.attention import paged_decode
from paged_kv.attention.testing import dense_attention, random_paged_batch
from paged_kv.attention.triton_decode import triton_paged_decode

gen = torch.Generator().manual_seed(0)
f32, f16 = torch.float32, torch.float16
cases = [  # block_size, kv_heads, group, head_dim, splits, dtype
    (1, 1, 1, 16, 1, f32), (8, 2, 4, 16, 2, f32), (16, 2, 3, 16, 3, f32),
    (64, 1, 8, 16, None, f32), (16, 2, 4, 40, 2, f16), (3, 1, 16, 8, None, f16),
    (32, 1, 20, 24, 2, f32), (5, 2, 2, 80, None, f32),
]
for block_size, kv_heads, group, head_dim, splits, dtype in cases:
    q, k_cache, v_cache, tables, lens, dense = random_paged_batch(
        gen, 3, block_size, kv_heads, group, head_dim, dtype
    )
    if splits is None:  # through the dispatcher
        out = paged_decode(q, k_cache, v_cache, tables, lens, backend="triton")
    else:
        out = triton_paged_decode(q, k_cache, v_cache, tables, lens, splits=splits)
    assert out.dtype == dtype and out.shape == q.shape and not out.isnan().any()
    for b, (k, v) in enumerate(dense):
        want = dense_attention(q[b : b + 1], k, v)[0]
        err = ((out[b].double() - want).abs().max() / want.abs().max()).item()
        limit = 1e-5 if dtype == f32 else 1e-2
        assert err < limit, (block_size, group, head_dim, splits, dtype, err)

# A slice entirely past a sequence's end (the table is wider than the sequence) adds nothing.
q, k_cache, v_cache, tables, lens, dense = random_paged_batch(gen, 2, 4, 1, 2, 16)
wide = torch.cat([tables, tables.new_zeros(2, 6)], dim=1)
out = triton_paged_decode(q, k_cache, v_cache, wide, lens, splits=4)
for b, (k, v) in enumerate(dense):
    assert torch.allclose(out[b].double(), dense_attention(q[b : b + 1], k, v)[0], atol=1e-5)
print("ok", len(cases) + 1)
"""


def test_interpreted_kernel_matches_the_dense_reference():
    result = subprocess.run(
        [sys.executable, "-c", INTERPRETED],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok 9"


def test_split_rule_fills_the_device_but_keeps_slices_long():
    from paged_kv.attention.triton_decode import num_splits

    assert num_splits(batch=1, num_kv_heads=8, max_len=32_768, target_programs=528) == 66
    assert num_splits(batch=64, num_kv_heads=8, max_len=32_768, target_programs=528) == 2
    assert num_splits(batch=1, num_kv_heads=8, max_len=200, target_programs=528) == 1


def test_fp32_caches_get_exact_dots_and_half_precision_ones_tensor_cores():
    from paged_kv.attention.triton_decode import dot_precision

    assert dot_precision(torch.float32) == "ieee"
    assert dot_precision(torch.float16) == dot_precision(torch.bfloat16) == "tf32"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize(
    "dtype, atol", [(torch.float16, 2e-3), (torch.bfloat16, 1e-2), (torch.float32, 1e-5)]
)
@pytest.mark.parametrize("head_dim", [40, 64, 80, 96, 112, 128, 160, 256])
@pytest.mark.parametrize("block_size, group", [(16, 4), (1, 1), (7, 16), (256, 8)])
def test_cuda_dispatch_uses_the_kernel_and_matches_the_reference(
    dtype, atol, head_dim, block_size, group
):
    from paged_kv.attention import decode_backend, paged_decode, reference_decode
    from paged_kv.attention.testing import random_paged_batch

    gen = torch.Generator().manual_seed(2)
    q, k_cache, v_cache, tables, lens, _ = random_paged_batch(
        gen, 4, block_size, 2, group, head_dim, dtype
    )
    args = [t.cuda() for t in (q, k_cache, v_cache, tables, lens)]
    assert decode_backend(*args[:3]) == "triton"
    out = paged_decode(*args).float()
    assert torch.allclose(out, reference_decode(*args).float(), atol=atol)
