"""GPU figures for the Triton paged-decode kernel, checked and timed in one run.

Run on a CUDA machine: `python bench/bench_attention_gpu.py [--save]` (--save writes
bench/results/attention_gpu.json). It first checks the kernel against the torch reference, then
checks that the serving engine on this device generates the tokens of cache-free decoding (fp32,
through the kernel), then measures: effective bandwidth of the kernel (bytes of K/V it must read
/ time) as a share of a device-to-device copy's bandwidth; paged decode against SDPA on the same
K/V laid out contiguously; and the split-K speedup at batch 1 with a 32k context. What is
compared runs in turn (kernel, SDPA and the copy at each point; one slice and the ruled split),
20 times; figures are medians with their min–max, ratios medians of the per-run ratios. Torch's
CPU threads are pinned to 1 (the GPU timings do not use them). `--smoke` runs tiny shapes (on
CPU under TRITON_INTERPRET=1) to check the script itself, and prints no figure: its timings
would mean nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

if "--smoke" in sys.argv and "TRITON_INTERPRET" not in os.environ:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch
import torch.nn.functional as F
from measure import pin_threads, spread
from results_file import add_save_flag, write_results

from paged_kv.attention import reference_decode
from paged_kv.attention.triton_decode import triton_paged_decode
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import TinyLM, greedy_dense

Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK = 32, 8, 128, 16


REPEATS = 20


def in_turn(device: str, fns: dict, repeats: int = REPEATS) -> dict[str, list[float]]:
    """ms of each run of each function, the functions taking turns (CUDA events on GPU)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()  # warm up (and compile)
    for _ in range(repeats):
        for name, fn in fns.items():
            if device == "cuda":
                start, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                times[name].append(start.elapsed_time(end))
            else:
                t = time.perf_counter()
                fn()
                times[name].append(1e3 * (time.perf_counter() - t))
    return times


def median(values: list[float]) -> float:
    return spread(values)["median"]


def span(values: list[float], digits: int = 3) -> str:
    s = spread(values)
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}–{s['max']:.{digits}f})"


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
    add_save_flag(parser, "attention_gpu")
    args = parser.parse_args()
    if args.smoke and args.save:
        parser.error("a --smoke run measures nothing; it is not saved")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.smoke:
        sys.exit("no CUDA device: run with --smoke to check the script on CPU")
    threads = pin_threads(1)
    dtype = torch.float16 if device == "cuda" else torch.float32
    grid = [(1, 1024), (8, 1024), (32, 4096), (64, 8192)] if not args.smoke else [(1, 64), (2, 64)]
    long_context = 32_768 if not args.smoke else 256
    repeats = REPEATS if not args.smoke else 2

    def report(line: str) -> None:  # a smoke run checks the script; its timings mean nothing
        if not args.smoke:
            print(line)

    # 1. Correctness first.
    errors = {str(t): kernel_error(device, t) for t in {dtype, torch.float32}}
    assert errors[str(dtype)] < (2e-2 if dtype == torch.float16 else 1e-4), errors
    assert errors[str(torch.float32)] < 1e-5, errors  # fp32 caches get exact fp32 dots
    print(f"kernel vs reference, max abs difference: {errors}")
    engine_ok = engine_matches_dense(device)
    print(f"engine on {device} gives the dense greedy tokens: {engine_ok}")

    # 2. At each point, in turn: the kernel, SDPA on contiguous K/V, and a device-to-device
    #    copy (the ceiling for a kernel that reads K and V once).
    big = torch.empty(256 * 2**20 if not args.smoke else 2**20, dtype=torch.uint8, device=device)
    copy_bytes = 2 * big.numel()  # read + write
    rows, copy_runs = [], []
    report(f"median of {repeats} runs in turn (min–max)")
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
        times = in_turn(
            device,
            {
                "kernel": lambda q=q, kc=kc, vc=vc, t=tables, n=lens: triton_paged_decode(
                    q, kc, vc, t, n
                ),
                "sdpa": lambda q=q, kd=kd, vd=vd: F.scaled_dot_product_attention(
                    q[:, :, None], kd, vd, enable_gqa=True
                ),
                "copy": lambda: big.clone(),
            },
            repeats,
        )
        kv_bytes = 2 * batch * context * KV_HEADS * HEAD_DIM * kc.element_size()
        gbs = [kv_bytes / ms / 1e6 for ms in times["kernel"]]
        copy_gbs = [copy_bytes / ms / 1e6 for ms in times["copy"]]
        copy_runs += copy_gbs
        share = [g / c for g, c in zip(gbs, copy_gbs, strict=True)]
        ratio = [k / s for k, s in zip(times["kernel"], times["sdpa"], strict=True)]
        row = {
            "batch": batch,
            "context": context,
            "kernel_ms": median(times["kernel"]),
            "sdpa_ms": median(times["sdpa"]),
            "paged_over_sdpa": median(ratio),
            "kernel_gb_s": median(gbs),
            "copy_gb_s": median(copy_gbs),
            "share_of_copy_bandwidth": median(share),
            "spread": {
                name: [spread(v)["min"], spread(v)["max"]]
                for name, v in {**times, "paged_over_sdpa": ratio, "share": share}.items()
            },
        }
        rows.append(row)
        report(
            f"batch {batch:>3} context {context:>6}: kernel {span(times['kernel'])} ms "
            f"({row['kernel_gb_s']:.0f} GB/s, {row['share_of_copy_bandwidth']:.0%} of copy), "
            f"SDPA {span(times['sdpa'])} ms, ratio {span(ratio, 2)}"
        )
    report(f"device-to-device copy, all points: {span(copy_runs, 0)} GB/s")

    # 3. Split-K at batch 1 with a long context, one slice and the ruled split in turn.
    q, kc, vc, tables, lens = make_batch(1, long_context, device, dtype)
    split = in_turn(
        device,
        {
            "one": lambda: triton_paged_decode(q, kc, vc, tables, lens, splits=1),
            "ruled": lambda: triton_paged_decode(q, kc, vc, tables, lens),
        },
        repeats,
    )
    speedup = [o / r for o, r in zip(split["one"], split["ruled"], strict=True)]
    report(
        f"batch 1, context {long_context}: 1 slice {span(split['one'])} ms, ruled split "
        f"{span(split['ruled'])} ms, speedup {span(speedup, 1)}x"
    )

    if args.smoke:
        print("smoke run: not a measurement (the script ran through; no figure is printed)")
        return
    if args.save:
        write_results(
            "attention_gpu",
            {
                "device": torch.cuda.get_device_name(),
                "dtype": str(dtype),
                "unit": f"ms, median of {repeats} runs in turn; ratios: median per-run ratio",
                "torch_threads": threads,
                "kernel_max_abs_error": errors,
                "engine_matches_dense": engine_ok,
                "copy_gb_s": median(copy_runs),
                "rows": rows,
                "split_k": {
                    "context": long_context,
                    "one_slice_ms": median(split["one"]),
                    "ruled_ms": median(split["ruled"]),
                    "speedup": median(speedup),
                    "speedup_spread": [min(speedup), max(speedup)],
                },
            },
        )
    else:
        print("\n(not saved; pass --save to write bench/results/attention_gpu.json)")

    if not engine_ok:
        sys.exit("the engine's tokens differ from dense decoding on this device (see above)")


if __name__ == "__main__":
    main()
