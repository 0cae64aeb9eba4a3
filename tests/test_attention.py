"""Paged attention against a float64 dense reference; KV content through the manager."""

import re
import warnings
from typing import Any, cast

import pytest
import torch

import paged_kv.attention as attention
from paged_kv import InvalidArgument, InvalidBlock, KVCacheManager
from paged_kv.attention import (
    decode_backend,
    paged_decode,
    paged_prefill,
    prefill_backend,
    reference_decode,
    reference_prefill,
    to_flashinfer,
)
from paged_kv.attention.cpu_decode import built_library
from paged_kv.attention.storage import KVStorage
from paged_kv.attention.testing import dense_attention, random_paged_batch


@pytest.mark.parametrize("decode", [paged_decode, reference_decode])
@pytest.mark.parametrize("block_size", [1, 8, 16, 32])
@pytest.mark.parametrize("group", [1, 2, 3, 4, 8])
def test_paged_decode_equals_dense_attention(decode, block_size, group):
    gen = torch.Generator().manual_seed(block_size * 10 + group)
    for _ in range(3):
        batch = int(torch.randint(1, 5, (1,), generator=gen))
        q, k_cache, v_cache, tables, lens, dense = random_paged_batch(
            gen, batch, block_size, 2, group, 16
        )
        out = decode(q, k_cache, v_cache, tables, lens)
        assert not out.isnan().any()
        for b, (k, v) in enumerate(dense):
            want = dense_attention(q[b : b + 1], k, v)[0]
            assert torch.allclose(out[b].double(), want, rtol=1e-5, atol=1e-5)


def test_paged_decode_in_fp16_stays_within_literature_tolerances():
    gen = torch.Generator().manual_seed(7)
    q, k_cache, v_cache, tables, lens, dense = random_paged_batch(
        gen, 3, 16, 2, 4, 32, torch.float16
    )
    out = paged_decode(q, k_cache, v_cache, tables, lens)
    assert out.dtype == torch.float16
    for b, (k, v) in enumerate(dense):
        want = dense_attention(q[b : b + 1], k, v)[0]
        assert (out[b].double() - want).abs().max() / want.abs().max() < 1e-2


@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_prefill_after_a_prefix_hit_equals_causal_attention_over_everything(block_size):
    gen = torch.Generator().manual_seed(block_size)
    seq_len, cached, hq, hkv, d = 37, 20, 8, 2, 16
    q_all = torch.randn(seq_len, hq, d, generator=gen)
    k = torch.randn(seq_len, hkv, d, generator=gen)
    v = torch.randn(seq_len, hkv, d, generator=gen)
    nb = -(-seq_len // block_size)
    table = torch.randperm(nb + 2, generator=gen)[:nb]
    k_cache = torch.full((nb + 2, block_size, hkv, d), float("nan"))
    v_cache = torch.full((nb + 2, block_size, hkv, d), float("nan"))
    for t in range(seq_len):
        k_cache[table[t // block_size], t % block_size] = k[t]
        v_cache[table[t // block_size], t % block_size] = v[t]
    out = paged_prefill(q_all[cached:], k_cache, v_cache, table, seq_len)
    want = dense_attention(q_all, k, v, causal_offset=0)[cached:]
    assert torch.allclose(out.double(), want, rtol=1e-5, atol=1e-5)


def test_bad_shapes_are_refused():
    q = torch.zeros(1, 3, 8)
    cache = torch.zeros(4, 4, 2, 8)
    with pytest.raises(InvalidArgument, match="multiple"):
        paged_decode(q, cache, cache, torch.zeros(1, 1, dtype=torch.int32), torch.tensor([1]))
    with pytest.raises(InvalidArgument):
        paged_prefill(torch.zeros(5, 2, 8), cache, cache, torch.tensor([0]), 4)


def test_flashinfer_format():
    indptr, indices, last = to_flashinfer([[7, 2, 9], [4], [5, 6]], [9, 3, 8], block_size=4)
    assert indptr.tolist() == [0, 3, 4, 6]
    assert indices.tolist() == [7, 2, 9, 4, 5, 6]
    assert last.tolist() == [1, 3, 4]
    assert indptr.dtype == torch.int32
    with pytest.raises(InvalidArgument):
        to_flashinfer([[1]], [5], block_size=4)


# -- content, end to end: what a sequence reads back is what was written for it ------------


def kv_for(tokens):
    """Deterministic K/V rows for a token sequence: each depends on the token and its position."""
    t = torch.tensor(tokens, dtype=torch.float32)[:, None, None]
    pos = torch.arange(len(tokens), dtype=torch.float32)[:, None, None]
    k = (t + pos / 1000).expand(-1, 2, 4) + torch.arange(4) / 100
    return k.contiguous(), -k


def test_tokens_read_back_through_tables_after_sharing_forks_and_eviction():
    manager = KVCacheManager(9, 4, eviction="lru")
    storage = KVStorage(2, 9, 4, 2, 4)
    expected = {}

    def write_new(seq, start):
        tokens = manager.token_ids(seq)
        k, v = kv_for(tokens)
        slots = manager.slot_mapping(seq, start, len(tokens))
        for layer in range(2):
            storage.write(layer, slots, k[start:], v[start:])
        expected[seq] = (k, v)

    def add(seq, tokens):
        manager.add_sequence(seq, tokens)
        write_new(seq, manager.num_cached_tokens(seq))  # hits are already in the cache

    def append(seq, tokens):
        start = manager.num_tokens(seq)
        manager.append_tokens(seq, tokens)
        storage.copy_blocks(manager.pop_block_copies())
        write_new(seq, start)

    system = list(range(100, 108))
    add("a", [*system, 1, 2, 3, 4])  # three full blocks
    add("b", [*system, 3])  # shares a's two system blocks
    manager.fork("b", "b2")
    expected["b2"] = expected["b"]
    append("b2", [50, 51])  # copy-on-write of b's shared last block
    append("b", [60])
    manager.free_sequence("a")
    add("c", list(range(200, 219)))  # needs 5 blocks: evicts a's cached third block
    for seq in ("b", "b2", "c"):
        k_want, v_want = expected[seq]
        for layer in range(2):
            k, v = storage.gather(layer, manager.block_table(seq), manager.num_tokens(seq))
            assert torch.equal(k, k_want) and torch.equal(v, v_want), seq
    assert manager.stats().evictions >= 1


def test_storage_skips_slot_minus_one_and_checks_shapes():
    storage = KVStorage(1, 2, 2, 1, 2)
    k = torch.ones(3, 1, 2)
    storage.write(0, [0, -1, 3], k, k * 2)
    assert storage.k[0].view(-1, 1, 2)[:, 0, 0].tolist() == [1, 0, 0, 1]
    with pytest.raises(InvalidArgument):
        storage.write(0, [0, 1], k, k)
    with pytest.raises(InvalidArgument):
        storage.write(0, [0, 1, 4], k, k)


def test_log_sum_exp_merge_of_slices_equals_one_softmax():
    from paged_kv.attention.reference import merge_partials

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


def test_library_passes_the_attention_checks():
    from paged_kv.attention.reference import merge_partials
    from paged_kv.attention.storage import write_kv
    from paged_kv.course import checks

    checks.check_paged_decode(paged_decode)
    checks.check_lse_merge(merge_partials)
    checks.check_write_kv(write_kv)


def test_attention_checks_catch_mistakes():
    from paged_kv.course import checks

    def ignores_the_table(q, k_cache, v_cache, tables, lens):
        flat = torch.arange(k_cache.shape[0])[None].expand(q.shape[0], -1)
        return paged_decode(q, k_cache, v_cache, flat, lens)

    with pytest.raises(checks.CheckFailed):
        checks.check_paged_decode(ignores_the_table)

    def naive_mean(outs, lses):
        return outs.mean(dim=-2)

    with pytest.raises(checks.CheckFailed, match="Weight"):
        checks.check_lse_merge(naive_mean)


def _flex(*args):
    from paged_kv.attention.flex import flex_paged_decode

    return flex_paged_decode(*args)


def _cpu(*args):
    from paged_kv.attention.cpu_decode import cpu_paged_decode

    return cpu_paged_decode(*args)


DECODERS = {"reference": reference_decode, "cpu": _cpu, "flex": _flex, "dispatch": paged_decode}


def _bad_decode_calls():
    """(name, call arguments, error, message) for each way a decode call can be wrong."""
    q, k, v, tables, lens, _ = random_paged_batch(torch.Generator().manual_seed(7), 3, 4, 2, 2, 16)
    capacity = tables.shape[1] * 4
    first_used = tables.clone()
    first_used[1, 0] = k.shape[0]  # one past the last block
    negative = tables.clone()
    negative[2, 0] = -1
    return [
        ("one length, three sequences", (q, k, v, tables, lens[:1]), InvalidArgument, "one length"),
        ("a table too few", (q, k, v, tables[:2], lens), InvalidArgument, "block_tables must"),
        ("float lengths", (q, k, v, tables, lens.float()), InvalidArgument, "integer"),
        (
            "beyond the table",
            (q, k, v, tables, lens.clone().fill_(capacity + 1)),
            InvalidArgument,
            f"holds 0..{capacity}",
        ),
        ("negative length", (q, k, v, tables, lens - 100), InvalidArgument, "has length -"),
        ("block id past the cache", (q, k, v, first_used, lens), InvalidBlock, "sequence 1 uses"),
        ("negative block id", (q, k, v, negative, lens), InvalidBlock, "block id -1"),
        ("heads not grouped", (q[:, :3], k, v, tables, lens), InvalidArgument, "multiple"),
        ("q not 3-D", (q[0], k, v, tables, lens), InvalidArgument, "shapes"),
        # Not tensors: refused with the call that makes one, never converted behind the caller.
        ("tables as lists", (q, k, v, [[0, 1], [2, 3], [4, 5]], lens), InvalidArgument,
         "block_tables must be a torch.Tensor ([batch, max_blocks] of block ids), got list; "
         "pass torch.tensor(block_tables, dtype=torch.int32"),
        ("tables as numpy", (q, k, v, tables.numpy(), lens), InvalidArgument, "got ndarray"),
        ("lengths as a list", (q, k, v, tables, lens.tolist()), InvalidArgument,
         "seq_lens must be a torch.Tensor ([batch] of lengths), got list; pass torch.tensor("),
        ("q as a list", (q.tolist(), k, v, tables, lens), InvalidArgument,
         "q must be a torch.Tensor"),
        ("a cache as numpy", (q, k.numpy(), v, tables, lens), InvalidArgument,
         "k_cache must be a torch.Tensor"),
        ("tables elsewhere", (q, k, v, tables.to("meta"), lens), InvalidArgument,
         "block_tables is on meta but the caches are on cpu; pass block_tables.to('cpu')"),
        ("q elsewhere", (q.to("meta"), k, v, tables, lens), InvalidArgument, "on one device"),
    ]  # fmt: skip


@pytest.mark.parametrize("backend", sorted(DECODERS))
@pytest.mark.parametrize(("case", "args", "error", "match"), _bad_decode_calls())
def test_every_decode_backend_refuses_a_bad_call_with_a_typed_error(
    backend, case, args, error, match
):
    with pytest.raises(error, match=re.escape(match)):
        DECODERS[backend](*args)


@pytest.mark.parametrize("backend", sorted(DECODERS))
def test_table_entries_past_a_sequence_are_not_checked(backend):
    q, k, v, tables, lens, _ = random_paged_batch(torch.Generator().manual_seed(8), 3, 4, 2, 2, 16)
    k, v = k.nan_to_num(), v.nan_to_num()  # flex lets NaN in visited unused slots through
    padded = torch.where(tables < 0, 10**6, tables)  # padding no length reaches
    out = DECODERS[backend](q, k, v, padded, lens)
    assert torch.allclose(out, reference_decode(q, k, v, tables, lens), atol=1e-5)


def test_prefill_refuses_a_table_that_is_not_a_tensor_on_the_caches_device():
    q, k, v, tables, lens, _ = random_paged_batch(torch.Generator().manual_seed(9), 1, 4, 2, 2, 16)
    table = tables[0][tables[0] >= 0]
    for bad, match in [
        (table.tolist(), "block_table must be a torch.Tensor ([blocks] of block ids), got list"),
        (table.to("meta"), "block_table is on meta but the caches are on cpu"),
    ]:
        with pytest.raises(InvalidArgument, match=re.escape(match)):
            paged_prefill(q[:1], k, v, cast(Any, bad), int(lens[0]))


def test_prefill_refuses_lengths_beyond_its_table_and_foreign_blocks():
    q, k, v, tables, lens, _ = random_paged_batch(torch.Generator().manual_seed(9), 1, 4, 2, 2, 16)
    table, n = tables[0][tables[0] >= 0], int(lens[0])
    with pytest.raises(InvalidArgument, match=r"holds 0\.\."):
        paged_prefill(q[:1].expand(2, -1, -1), k, v, table, len(table) * 4 + 1)
    bad = table.clone()
    bad[-1] = k.shape[0]
    with pytest.raises(InvalidBlock, match="uses block id"):
        paged_prefill(q[:1], k, v, bad, n)
    with pytest.raises(InvalidArgument, match="seq_len"):
        paged_prefill(q[:1], k, v, table, cast(Any, 1.5))
    with pytest.raises(InvalidArgument, match="1-D integer"):
        paged_prefill(q[:1], k, v, table[None], n)


def test_triton_entries_check_before_launching(monkeypatch):
    pytest.importorskip("triton")
    from paged_kv.attention import triton_decode, triton_prefill

    q, k, v, tables, lens, _ = random_paged_batch(torch.Generator().manual_seed(10), 2, 4, 2, 2, 16)
    for module in (triton_decode, triton_prefill):
        monkeypatch.setattr(module, "triton_refusal", lambda *a: None)  # as on a GPU
    bad = tables.clone()
    bad[0, 0] = 99
    with pytest.raises(InvalidBlock, match="block id 99"):
        triton_decode.triton_paged_decode(q, k, v, bad, lens)
    with pytest.raises(InvalidBlock, match="block id 99"):
        triton_prefill.triton_paged_prefill(q[:1], k, v, bad[0], int(lens[0]))


# Which path `paged_decode` / `paged_prefill` take, and the refusals of a forced backend.


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


def test_unaligned_caches_go_to_the_reference():
    from paged_kv.attention.triton_shapes import triton_refusal

    q, _, _ = meta(head_dim=64)
    pool = torch.empty(2, 4096, 16, 8, 68, dtype=torch.float16, device="meta")
    padded = pool[0, ..., :64]  # rows of 68 elements: strides not multiples of 8
    assert "strides" in triton_refusal(q, padded, padded, device="cuda")
    assert decode_backend(q, padded, padded, device="cuda") == "reference"


def test_strided_but_aligned_caches_go_to_triton_where_it_is_installed():
    from paged_kv.attention.triton_shapes import triton_refusal

    q, _, _ = meta(head_dim=64)
    kv = torch.empty(4096, 2, 16, 8, 64, dtype=torch.float16, device="meta")
    k, v = kv[:, 0], kv[:, 1]  # K and V interleaved per block: strided, but aligned
    assert triton_refusal(q, k, v, device="cuda") is None  # the kernels take them
    installed = "triton" if attention.HAS_TRITON else "reference"
    assert decode_backend(q, k, v, device="cuda") == installed


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


def interleaved_batch(dtype=torch.float32):
    """A batch whose K and V share one tensor, FlashInfer-style [blocks, 2, block_size, heads,
    dim]: each cache is a strided view, which the C++ kernel does not read."""
    q, k, v, tables, lens, _ = random_paged_batch(torch.Generator().manual_seed(3), 3, 4, 2, 2, 16)
    kv = torch.stack((k, v), dim=1).to(dtype)
    return q.to(dtype), kv[:, 0], kv[:, 1], tables, lens


def test_auto_falling_back_to_the_reference_says_why_once_per_reason(monkeypatch):
    from paged_kv.attention import slow_path

    monkeypatch.setattr(slow_path, "_told", set())  # a fresh process, as far as it knows
    q, k, v, tables, lens = interleaved_batch()
    assert not k.is_contiguous() and decode_backend(q, k, v) == "reference"
    with pytest.warns(attention.SlowPathWarning) as told:
        out = paged_decode(q, k, v, tables, lens)
    [warning] = told
    assert warning.filename == __file__  # it points at the caller's line
    assert re.search(
        r"paged_decode ran the torch reference, not the C\+\+ kernel, because the caches are "
        r"not contiguous .*k_cache\.contiguous\(\).*backend='reference'",
        str(warning.message),
    )
    assert torch.equal(out, reference_decode(q, k, v, tables, lens))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once: the same reason is quiet from now on,
        paged_decode(q, k, v, tables, lens)
        paged_decode(q, k, v, tables, lens, backend="reference")  # as is the reference asked for
        paged_decode(q, k.contiguous(), v.contiguous(), tables, lens)  # and the fast path
        with pytest.warns(attention.SlowPathWarning, match="fp32 only"):  # another reason
            paged_decode(*interleaved_batch(torch.float16))
        paged_prefill(q[:1], k, v, tables[0], int(lens[0]))  # no C++ prefill: nothing to say


def test_prefill_reference_backend_is_the_reference():
    gen = torch.Generator().manual_seed(2)
    _, k_cache, v_cache, tables, lens, _ = random_paged_batch(gen, 1, 4, 2, 2, 16)
    n = int(lens[0])
    new = torch.randn(min(n, 3), 4, 16, generator=gen)
    out = paged_prefill(new, k_cache, v_cache, tables[0], n, backend="reference")
    assert torch.equal(out, reference_prefill(new, k_cache, v_cache, tables[0], n))
    assert torch.equal(out, paged_prefill(new, k_cache, v_cache, tables[0], n))


@pytest.mark.parametrize(
    ("layer", "table", "num_tokens", "error"),
    [
        (2, [0], 1, InvalidArgument),  # no such layer
        (0, [0], 5, InvalidArgument),  # more tokens than one block of 4 holds
        (0, [0], -1, InvalidArgument),
        (0, [9], 1, InvalidBlock),  # the cache has blocks 0..8
        (0, [-1], 1, InvalidBlock),
    ],
)
def test_gather_refuses_what_its_table_cannot_hold(layer, table, num_tokens, error):
    storage = KVStorage(2, 9, 4, 2, 4)
    with pytest.raises(error):
        storage.gather(layer, table, num_tokens)
    k, v = storage.gather(0, [8, -1], 4)  # padding past the used blocks is not read
    assert k.shape == v.shape == (4, 2, 4)
