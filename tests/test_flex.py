"""FlexAttention over the page table (torch's own paged attention) agrees with `paged_decode`.

Eager flex on the CPU, tiny shapes. The unused slots hold random finite values, not NaN: flex
masks scores, not loads, so a NaN in a visited slot would reach its output (ours mask loads).
`compiled=True` works on the CPU too, but its first call compiles for about a minute.
"""

import pytest
import torch

from paged_kv.attention import paged_decode
from paged_kv.attention.flex import flex_paged_decode, paged_block_mask
from paged_kv.attention.testing import dense_attention, random_paged_batch


def batch_without_nan(seed, block_size, group, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    q, k_cache, v_cache, tables, lens, dense = random_paged_batch(
        gen, 3, block_size, 2, group, 16, dtype
    )
    for cache in (k_cache, v_cache):
        garbage = torch.randn(cache.shape, generator=gen).to(dtype)
        cache.copy_(torch.where(cache.isnan(), garbage, cache))
    return q, k_cache, v_cache, tables, lens, dense


@pytest.mark.parametrize("block_size, group", [(1, 1), (4, 4), (16, 2), (3, 8)])
def test_flex_over_the_page_table_equals_paged_decode(block_size, group):
    q, k_cache, v_cache, tables, lens, dense = batch_without_nan(block_size, block_size, group)
    out = flex_paged_decode(q, k_cache, v_cache, tables, lens)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert torch.allclose(out, paged_decode(q, k_cache, v_cache, tables, lens), atol=1e-5)
    for b, (k, v) in enumerate(dense):
        assert torch.allclose(out[b].double(), dense_attention(q[b : b + 1], k, v)[0], atol=1e-5)


def test_one_block_mask_serves_every_layer_and_half_precision():
    q, k_cache, v_cache, tables, lens, _ = batch_without_nan(9, 8, 4, torch.float16)
    mask = paged_block_mask(tables, lens, k_cache.shape[0], k_cache.shape[1])
    for scale in (None, 0.3):  # two "layers": same tables, other values and scale
        out = flex_paged_decode(q, k_cache, v_cache, tables, lens, scale, block_mask=mask)
        want = paged_decode(q, k_cache, v_cache, tables, lens, scale)
        assert out.dtype == torch.float16
        assert (out.float() - want.float()).abs().max() < 2e-3
        k_cache, v_cache = v_cache, k_cache
