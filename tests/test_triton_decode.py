"""The Triton decode kernel equals the torch reference: interpreted on CPU, native on CUDA.

TRITON_INTERPRET must be set before triton is imported, so the CPU checks run in a fresh
Python process; tiny shapes keep the interpreter fast.
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
from paged_kv.attention.testing import dense_attention, random_paged_batch
from paged_kv.attention import reference_decode
from paged_kv.attention.triton_decode import triton_paged_decode

gen = torch.Generator().manual_seed(0)
cases = [(1, 1, 1, torch.float32), (8, 4, 2, torch.float32), (16, 2, 3, torch.float32),
         (32, 8, None, torch.float32), (16, 4, 2, torch.float16), (4, 1, None, torch.float16)]
for block_size, group, splits, dtype in cases:
    batch = random_paged_batch(gen, 3, block_size, 2, group, 16, dtype)
    q, k_cache, v_cache, tables, lens, dense = batch
    out = triton_paged_decode(q, k_cache, v_cache, tables, lens, splits=splits)
    assert out.dtype == dtype and not out.isnan().any()
    for b, (k, v) in enumerate(dense):
        want = dense_attention(q[b : b + 1], k, v)[0]
        err = ((out[b].double() - want).abs().max() / want.abs().max()).item()
        limit = 1e-5 if dtype == torch.float32 else 1e-2
        assert err < limit, (block_size, group, splits, dtype, err)
print("ok", len(cases))
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
    assert result.stdout.strip() == "ok 6"


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
@pytest.mark.parametrize("dtype, atol", [(torch.float16, 2e-3), (torch.float32, 1e-5)])
def test_cuda_dispatch_uses_the_kernel_and_matches_the_reference(dtype, atol):
    from paged_kv.attention import paged_decode, reference_decode
    from paged_kv.attention.testing import random_paged_batch

    gen = torch.Generator().manual_seed(2)
    q, k_cache, v_cache, tables, lens, _ = random_paged_batch(gen, 4, 16, 8, 4, 128, dtype)
    args = [t.cuda() for t in (q, k_cache, v_cache, tables, lens)]
    assert torch.allclose(paged_decode(*args).float(), reference_decode(*args).float(), atol=atol)
