"""Ahead-of-time compilation for sm_80 and sm_90 on a machine without a GPU.

1. The variant set is finite and covers the supported range: every dtype x head dimension
   (multiples of 8 up to 256) x block size 1-256 x group lands on a listed variant.
2. Calls of one class share one binary: planned on meta tensors (the code a real call runs) and
   bound by Triton's own launcher logic, calls of different sizes give the same compile key.
3. A stratified subset compiles down to cubins for both targets (every kernel x width x target,
   dtypes and block classes in rotation: 30 of the 150 compiles, about a minute on 2 cores);
   `python tools/triton_aot_report.py` compiles all 150 (several minutes) and writes the table.
"""

import os

import pytest
import torch

from paged_kv.attention import HAS_TRITON

pytestmark = [
    pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed (extra: triton)"),
    pytest.mark.skipif(
        os.environ.get("TRITON_INTERPRET") == "1", reason="needs the compiler, not the interpreter"
    ),
]

HEAD_DIMS = range(8, 257, 8)
BLOCK_SIZES = range(1, 257)
MAX_SHARED = 99 * 1024  # dynamic shared memory per block on sm_86/sm_89, the smallest sm_8x+


def test_every_supported_shape_lands_on_a_listed_variant():
    from paged_kv.attention.triton_shapes import DTYPES, all_variants, variants_for

    seen = set()
    for dtype in DTYPES:
        for head_dim in HEAD_DIMS:
            for block_size in BLOCK_SIZES:
                for kernel in ("decode", "prefill"):
                    seen.update(variants_for(kernel, dtype, head_dim, block_size))
    assert seen == set(all_variants())
    assert len(seen) == 75  # 3 dtypes x 5 widths x (2 block classes x 2 kernels + 1 merge)


def sample_calls():
    """Sizes across the whole range, from every class: head dims of models and odd ones,
    block sizes on and off the tiles, groups 1 to 40, one or eight KV heads."""
    from paged_kv.attention.triton_shapes import DTYPES

    for dtype in DTYPES:
        for head_dim in (8, 24, 40, 64, 80, 96, 112, 128, 160, 200, 256):
            for block_size, group, kv_heads in [(1, 1, 8), (3, 7, 1), (16, 16, 8), (64, 33, 1),
                                                (24, 4, 8), (256, 2, 1)]:  # fmt: skip
                yield dtype, head_dim, block_size, group, kv_heads


def test_calls_of_one_class_share_the_representative_binary():
    from paged_kv.attention.triton_aot import TARGETS, compile_key, meta_call, representative
    from paged_kv.attention.triton_shapes import variants_for

    target = TARGETS["sm_90"]
    keys = {}
    for dtype, head_dim, block_size, group, kv_heads in sample_calls():
        for kernel in ("decode", "prefill"):
            launches = meta_call(kernel, dtype, head_dim, block_size, group, kv_heads)
            variants = variants_for(kernel, dtype, head_dim, block_size)
            assert len(launches) == len(variants)
            for launch, variant in zip(launches, variants, strict=True):
                if variant not in keys:
                    keys[variant] = compile_key(representative(variant), target)
                assert compile_key(launch, target) == keys[variant], (variant, head_dim, group)
    assert len(keys) == 75


def stratified_subset():
    """Every kernel x padded width x target once; dtypes and block classes rotate."""
    from paged_kv.attention.triton_shapes import DTYPES, HEAD_DIM_WIDTHS, Variant

    out = []
    for kernel in ("decode", "merge", "prefill"):
        for w, width in enumerate(HEAD_DIM_WIDTHS):
            for t, target in enumerate(("sm_80", "sm_90")):
                dtype = DTYPES[(2 * w + t) % 3]
                block_class = "-" if kernel == "merge" else ("whole", "any")[(w + t) % 2]
                out.append((Variant(kernel, dtype, width, block_class), target))
    return out


def test_a_stratified_subset_compiles_for_sm80_and_sm90(tmp_path, monkeypatch):
    from triton import knobs

    from paged_kv.attention.triton_aot import compile_variant

    subset = stratified_subset()
    for kernel in ("decode", "prefill"):  # each dtype and block class meets each target
        for target in ("sm_80", "sm_90"):
            picked = [v for v, t in subset if v.kernel == kernel and t == target]
            assert {v.block_class for v in picked} == {"whole", "any"}
        assert {v.dtype for v, _ in subset if v.kernel == kernel} == {
            torch.float32,
            torch.float16,
            torch.bfloat16,
        }
    monkeypatch.setattr(knobs.cache, "dir", str(tmp_path))  # compile for real
    problems = []
    for variant, target in subset:
        record = compile_variant(variant, target)
        if "error" in record:
            problems.append(f"{variant.name} {target}: {record['error']}")
        elif record["shared_bytes"] > MAX_SHARED:
            problems.append(f"{variant.name} {target}: {record['shared_bytes']} B shared")
    assert not problems, "\n".join(problems)
