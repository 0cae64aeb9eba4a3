"""The Triton decode kernel equals the torch reference: interpreted on CPU, native on CUDA.

TRITON_INTERPRET must be set before triton is imported, so the CPU checks run in a fresh
Python process; tiny shapes keep the interpreter fast.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from paged_kv.attention import HAS_TRITON

pytestmark = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (extra: triton)")
TESTS = Path(__file__).resolve().parent

INTERPRETED = """
import torch
from test_attention import dense_attention, random_paged_batch
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
        env={**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(TESTS)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok 6"


def test_log_sum_exp_merge_of_slices_equals_one_softmax():
    from paged_kv.attention.triton_decode import merge_partials

    gen = torch.Generator().manual_seed(1)
    scores, values = torch.randn(12, generator=gen), torch.randn(12, 4, generator=gen)
    whole = torch.softmax(scores, 0) @ values
    slices = [slice(0, 5), slice(5, 12), slice(12, 12)]  # the last slice is empty
    outs, lses = [], []
    for s in slices:
        if s.start == s.stop:
            outs.append(torch.zeros(4))
            lses.append(torch.tensor(float("-inf")))
            continue
        outs.append(torch.softmax(scores[s], 0) @ values[s])
        lses.append(torch.logsumexp(scores[s], 0))
    merged = merge_partials(torch.stack(outs), torch.stack(lses))
    assert torch.allclose(merged, whole, atol=1e-6)


def test_split_rule_fills_the_device_but_keeps_slices_long():
    from paged_kv.attention.triton_decode import num_splits

    assert num_splits(batch=1, num_kv_heads=8, max_len=32_768, target_programs=528) == 66
    assert num_splits(batch=64, num_kv_heads=8, max_len=32_768, target_programs=528) == 2
    assert num_splits(batch=1, num_kv_heads=8, max_len=200, target_programs=528) == 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_dispatch_uses_the_kernel_and_matches_the_reference():
    from test_attention import random_paged_batch

    from paged_kv.attention import paged_decode, reference_decode

    gen = torch.Generator().manual_seed(2)
    q, k_cache, v_cache, tables, lens, _ = random_paged_batch(gen, 4, 16, 8, 4, 128, torch.float16)
    args = [t.cuda() for t in (q, k_cache, v_cache, tables, lens)]
    assert torch.allclose(paged_decode(*args).float(), reference_decode(*args).float(), atol=2e-3)
