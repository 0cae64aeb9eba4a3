"""GPU figures for the Triton paged-decode kernel, checked and timed in one run.

Run on a CUDA machine: `python bench/bench_attention_gpu.py` (writes
bench/results/attention_gpu.json). It first checks the kernel against the torch reference, then
checks that the serving engine on this device generates the tokens of cache-free decoding (fp32,
through the kernel), then measures: effective bandwidth of the kernel (bytes of K/V it must read
/ time) as a share of a device-to-device copy's bandwidth; paged decode against SDPA on the same
K/V laid out contiguously; and the split-K speedup at batch 1 with a 32k context. `--smoke` runs
tiny shapes (on CPU under TRITON_INTERPRET=1) to check the script itself.
"""

from __future__ import annotations

import argparse
import os
import sys

if "--smoke" in sys.argv and "TRITON_INTERPRET" not in os.environ:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch
import torch.nn.functional as F
from results_file import write_results

from paged_kv.attention import reference_decode
from paged_kv.attention.triton_decode import triton_paged_decode
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import TinyLM, greedy_dense

Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK = 32, 8, 128, 16


def timer(device: str):
    """ms of the fastest of `repeats` runs of fn (CUDA events on GPU)."""

    def best_ms(fn, repeats: int = 20) -> float:
        fn()
        times = []
        for _ in range(repeats):
            if device == "cuda":
                start, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
            else:
                import time

                t = time.perf_counter()
                fn()
                times.append(1e3 * (time.perf_counter() - t))
        return min(times)

    return best_ms


def make_batch(batch: int, context: int, device: str, dtype: torch.dtype):
    blocks = batch * context // BLOCK
    k_cache = torch.randn(blocks, BLOCK, KV_HEADS, HEAD_DIM, device=device, dtype=dtype)
    v_cache = torch.randn(blocks, BLOCK, KV_HEADS, HEAD_DIM, device=device, dtype=dtype)
    tables = torch.randperm(blocks, device=device).view(batch, -1).to(torch.int32)
    lens = torch.full((batch,), context, device=device, dtype=torch.int32)
    q = torch.randn(batch, Q_HEADS, HEAD_DIM, device=device, dtype=dtype)
    return q, k_cache, v_cache, tables, lens


def kernel_error(device: str, dtype: torch.dtype) -> float:
    """Largest difference between the kernel and the torch reference on a small batch."""
    q, kc, vc, tables, lens = make_batch(3, 1024, device, dtype)
    out = triton_paged_decode(q, kc, vc, tables, lens).float()
    return (out - reference_decode(q, kc, vc, tables, lens).float()).abs().max().item()


def engine_matches_dense(device: str) -> bool:
    """The tiny fp32 model served by the engine (preempting in 12 blocks) on `device` gives
    the greedy tokens of decoding without any cache."""
    model = TinyLM(seed=0).to(device)
    prompts = [list(range(10 + i, 40 + 3 * i)) for i in range(4)]
    engine = Engine(model, num_blocks=12, block_size=16)
    out = engine.generate(prompts, 16)
    return [c.token_ids for c in out] == [greedy_dense(model, p, 16) for p in prompts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny shapes; CPU is fine")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.smoke:
        sys.exit("no CUDA device: run with --smoke to check the script on CPU")
    dtype = torch.float16 if device == "cuda" else torch.float32
    best_ms = timer(device)
    grid = [(1, 1024), (8, 1024), (32, 4096), (64, 8192)] if not args.smoke else [(1, 64), (2, 64)]
    long_context = 32_768 if not args.smoke else 256

    # 1. Correctness first.
    errors = {str(t): kernel_error(device, t) for t in {dtype, torch.float32}}
    assert errors[str(dtype)] < (2e-2 if dtype == torch.float16 else 1e-4), errors
    assert errors[str(torch.float32)] < 1e-5, errors  # fp32 caches get exact fp32 dots
    print(f"kernel vs reference, max abs difference: {errors}")
    engine_ok = engine_matches_dense(device)
    print(f"engine on {device} gives the dense greedy tokens: {engine_ok}")

    # 2. Copy bandwidth of this device, the ceiling for a kernel that reads K and V once.
    big = torch.empty(256 * 2**20 if not args.smoke else 2**20, dtype=torch.uint8, device=device)
    copy_ms = best_ms(lambda: big.clone())
    copy_gbs = 2 * big.numel() / copy_ms / 1e6  # read + write
    print(f"device-to-device copy: {copy_gbs:.0f} GB/s")

    rows = []
    for batch, context in grid:
        q, kc, vc, tables, lens = make_batch(batch, context, device, dtype)
        kd = (
            kc[tables.long()]
            .reshape(batch, context, KV_HEADS, HEAD_DIM)
            .transpose(1, 2)
            .contiguous()
        )
        vd = (
            vc[tables.long()]
            .reshape(batch, context, KV_HEADS, HEAD_DIM)
            .transpose(1, 2)
            .contiguous()
        )
        kernel_ms = best_ms(
            lambda q=q, kc=kc, vc=vc, t=tables, n=lens: triton_paged_decode(q, kc, vc, t, n)
        )
        sdpa_ms = best_ms(
            lambda q=q, kd=kd, vd=vd: F.scaled_dot_product_attention(
                q[:, :, None], kd, vd, enable_gqa=True
            )
        )
        kv_bytes = 2 * batch * context * KV_HEADS * HEAD_DIM * kc.element_size()
        gbs = kv_bytes / kernel_ms / 1e6
        row = {
            "batch": batch,
            "context": context,
            "kernel_ms": kernel_ms,
            "sdpa_ms": sdpa_ms,
            "paged_over_sdpa": kernel_ms / sdpa_ms,
            "kernel_gb_s": gbs,
            "share_of_copy_bandwidth": gbs / copy_gbs,
        }
        rows.append(row)
        print(
            f"batch {batch:>3} context {context:>6}: kernel {kernel_ms:.3f} ms ({gbs:.0f} GB/s, "
            f"{gbs / copy_gbs:.0%} of copy), SDPA {sdpa_ms:.3f} ms, ratio {kernel_ms / sdpa_ms:.2f}"
        )

    # 3. Split-K at batch 1 with a long context.
    q, kc, vc, tables, lens = make_batch(1, long_context, device, dtype)
    one = best_ms(lambda: triton_paged_decode(q, kc, vc, tables, lens, splits=1))
    ruled = best_ms(lambda: triton_paged_decode(q, kc, vc, tables, lens))
    print(
        f"batch 1, context {long_context}: 1 slice {one:.3f} ms, ruled split {ruled:.3f} ms, "
        f"speedup {one / ruled:.1f}x"
    )

    if args.smoke:
        return  # checked the script; the figures mean nothing on a CPU
    write_results(
        "attention_gpu",
        {
            "device": torch.cuda.get_device_name(),
            "dtype": str(dtype),
            "kernel_max_abs_error": errors,
            "engine_matches_dense": engine_ok,
            "copy_gb_s": copy_gbs,
            "rows": rows,
            "split_k": {
                "context": long_context,
                "one_slice_ms": one,
                "ruled_ms": ruled,
                "speedup": one / ruled,
            },
        },
    )

    if not engine_ok:
        sys.exit("the engine's tokens differ from dense decoding on this device (see above)")


if __name__ == "__main__":
    main()
