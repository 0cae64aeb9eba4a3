"""The C++ CPU decode kernel against the float64 dense reference, and its fallbacks.

Tables are shuffled and padded with -1, every unused cache slot holds NaN, and lengths are
rarely multiples of the block size (see `random_paged_batch`). Skipped where it cannot build.
"""

import pytest
import torch

from paged_kv.attention import cpu_decode, paged_decode, reference_decode
from paged_kv.attention.testing import dense_attention, random_paged_batch
from paged_kv.errors import InvalidArgument, InvalidBlock


@pytest.fixture(scope="module", autouse=True)
def kernel():
    if cpu_decode._kernel() is None:
        pytest.skip("the C++ kernel did not build here (no compiler?)")


@pytest.mark.parametrize("block_size", [1, 5, 16])
@pytest.mark.parametrize("group", [1, 2, 3, 4, 7, 8, 12])
@pytest.mark.parametrize("head_dim", [16, 128])
def test_kernel_equals_dense_attention(block_size, group, head_dim):
    gen = torch.Generator().manual_seed(block_size * 100 + group * 10 + head_dim)
    q, k_cache, v_cache, tables, lens, dense = random_paged_batch(
        gen, 5, block_size, 2, group, head_dim
    )
    assert cpu_decode.handles(q, k_cache, v_cache)
    out = cpu_decode.cpu_paged_decode(q, k_cache, v_cache, tables, lens)
    assert out.dtype == torch.float32 and not out.isnan().any()
    for b, (k, v) in enumerate(dense):
        want = dense_attention(q[b : b + 1], k, v)[0]
        assert torch.allclose(out[b].double(), want, rtol=1e-5, atol=1e-5)


def long_paged_batch(gen, lens, block_size, kv_heads, group, head_dim):
    """Like `random_paged_batch`, for given lengths: shuffled blocks, NaN in unused slots."""
    counts = [-(-n // block_size) for n in lens]
    order = torch.randperm(sum(counts) + 2, generator=gen).tolist()
    shape = (len(order), block_size, kv_heads, head_dim)
    k_cache, v_cache = torch.full(shape, float("nan")), torch.full(shape, float("nan"))
    tables = torch.full((len(lens), max(counts)), -1)
    dense = []
    for b, (n, count) in enumerate(zip(lens, counts, strict=True)):
        tables[b, :count] = torch.tensor([order.pop() for _ in range(count)], dtype=torch.int64)
        k, v = torch.randn(2, n, kv_heads, head_dim, generator=gen)
        slots = tables[b].repeat_interleave(block_size)[:n], torch.arange(n) % block_size
        k_cache[slots], v_cache[slots] = k, v
        dense.append((k, v))
    q = 4 * torch.randn(len(lens), kv_heads * group, head_dim, generator=gen)  # peaky softmax
    return q, k_cache, v_cache, tables, torch.tensor(lens), dense


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("block_size", [5, 16])
def test_long_sequences_split_into_pieces_merge_exactly(threads, block_size):
    # 1000 tokens is cut into 3 or more pieces at 1 or 2 threads, 333 into 1 or 2; an empty
    # sequence and a 2-token one sit beside them.
    gen = torch.Generator().manual_seed(block_size)
    q, k_cache, v_cache, tables, lens, dense = long_paged_batch(
        gen, [1000, 0, 333, 2], block_size, 2, 3, 16
    )
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        out = cpu_decode.cpu_paged_decode(q, k_cache, v_cache, tables, lens)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    for b in (0, 2, 3):
        want = dense_attention(q[b : b + 1], *dense[b])[0]
        assert torch.allclose(out[b].double(), want, rtol=1e-5, atol=1e-5)


def test_paged_decode_uses_the_kernel_and_agrees_with_the_reference():
    gen = torch.Generator().manual_seed(3)
    q, k_cache, v_cache, tables, lens, _ = random_paged_batch(gen, 6, 16, 4, 4, 64)
    out = paged_decode(q, k_cache, v_cache, tables, lens, scale=0.3)
    assert torch.equal(out, cpu_decode.cpu_paged_decode(q, k_cache, v_cache, tables, lens, 0.3))
    want = reference_decode(q, k_cache, v_cache, tables, lens, scale=0.3)
    assert torch.allclose(out, want, rtol=1e-5, atol=1e-5)


def test_an_empty_sequence_gives_zeros_like_the_reference():
    gen = torch.Generator().manual_seed(4)
    q, k_cache, v_cache, tables, lens, _ = random_paged_batch(gen, 2, 4, 2, 2, 16)
    lens[0] = 0
    out = cpu_decode.cpu_paged_decode(q, k_cache, v_cache, tables, lens)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    assert torch.equal(reference_decode(q, k_cache, v_cache, tables, lens)[0], out[0])


def test_bad_tables_and_lengths_raise_typed_errors_instead_of_reading_out_of_bounds():
    q, cache = torch.zeros(1, 2, 16), torch.zeros(3, 4, 1, 16)
    with pytest.raises(InvalidBlock, match=r"block id 7 .* blocks 0\.\.2"):
        cpu_decode.cpu_paged_decode(q, cache, cache, torch.tensor([[0, 7]]), torch.tensor([6]))
    with pytest.raises(InvalidArgument, match=r"length 9, .* holds 0\.\.8 tokens"):
        cpu_decode.cpu_paged_decode(q, cache, cache, torch.tensor([[0, 1]]), torch.tensor([9]))


def test_other_calls_go_to_the_reference():
    cache = torch.zeros(3, 4, 1, 16)
    q = torch.zeros(1, 2, 16)
    assert not cpu_decode.handles(q.half(), cache.half(), cache.half())
    assert not cpu_decode.handles(q[..., :8], cache[..., :8], cache[..., :8])  # head_dim 8
    assert not cpu_decode.handles(q, cache.transpose(0, 1), cache.transpose(0, 1))
    assert not cpu_decode.handles(q.requires_grad_(), cache, cache)


def test_a_failed_build_warns_once_naming_the_cause_and_falls_back(monkeypatch, tmp_path):
    def no_compiler(**kwargs):
        raise RuntimeError(
            "Error building extension 'paged_kv_cpu_decode': [1/2] c++ -MMD -c x.cpp\n"
            "FAILED: paged_kv_cpu_decode.o\n/bin/sh: 1: c++: not found\nninja: build stopped"
        )

    monkeypatch.setenv("PAGED_KV_BUILD_DIR", str(tmp_path))  # nothing built there yet
    monkeypatch.setattr("torch.utils.cpp_extension.load", no_compiler)
    with pytest.warns(RuntimeWarning, match=r"did not build \(/bin/sh: 1: c\+\+: not found"):
        assert cpu_decode._kernel.__wrapped__() is None
    assert "ninja: build stopped" in (cpu_decode.build_dir() / "build.log").read_text()
    assert cpu_decode.built_library() is None
    monkeypatch.setattr(cpu_decode, "_kernel", lambda: None)
    gen = torch.Generator().manual_seed(5)
    q, k_cache, v_cache, tables, lens, _ = random_paged_batch(gen, 2, 4, 2, 2, 16)
    assert not cpu_decode.handles(q, k_cache, v_cache)
    want = reference_decode(q, k_cache, v_cache, tables, lens)
    assert torch.equal(paged_decode(q, k_cache, v_cache, tables, lens), want)
