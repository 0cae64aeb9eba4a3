"""GPU figures for the Triton paged-attention kernels, checked and timed in one run.

Run on a CUDA machine: `python bench/bench_attention_gpu.py [--save]` (--save writes
bench/results/attention_gpu.json); a few minutes on an H100-class GPU. Every output is checked
before anything is timed: decode (fp16, bf16, fp32; head_dim 128 and 80, padded to 128) and
prefill over a cached prefix against the torch reference, FlexAttention against `paged_decode`,
and the serving engine on this device against cache-free decoding (fp32, through the kernels).
Then it measures decode: effective bandwidth (bytes of K/V the kernel must read / time) as a
share of a device-to-device copy's bandwidth (goal: >= 70% at batch 64 x 4k context, fp16) and
time against SDPA on the same K/V laid out contiguously (goal: <= 1.1x), with compiled
FlexAttention over the page table timed as a peer at two points; prefill against the gathering
reference and SDPA on contiguous K/V; the split-K speedup at batch 1 with a 32k context; and
the engine's tokens/s. What is compared runs in turn, 20 times; figures are medians with their
min–max, ratios medians of the per-run ratios. Torch's CPU threads are pinned to 1 (the GPU
timings do not use them). `--smoke` runs tiny shapes (on CPU under TRITON_INTERPRET=1, eager
FlexAttention) to check the script itself, and prints no figure: its timings would mean nothing.
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

from paged_kv.attention import (
    decode_backend,
    paged_decode,
    paged_prefill,
    prefill_backend,
    reference_decode,
    reference_prefill,
)
from paged_kv.attention.flex import flex_paged_decode, paged_block_mask
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


def make_batch(batch: int, context: int, device: str, dtype: torch.dtype, head_dim=HEAD_DIM):
    blocks = batch * context // BLOCK
    k_cache = torch.randn(blocks, BLOCK, KV_HEADS, head_dim, device=device, dtype=dtype)
    v_cache = torch.randn(blocks, BLOCK, KV_HEADS, head_dim, device=device, dtype=dtype)
    tables = torch.randperm(blocks, device=device).view(batch, -1).to(torch.int32)
    lens = torch.full((batch,), context, device=device, dtype=torch.int32)
    q = torch.randn(batch, Q_HEADS, head_dim, device=device, dtype=dtype)
    return q, k_cache, v_cache, tables, lens


def decode_error(device: str, dtype: torch.dtype, head_dim: int, context: int) -> float:
    """Largest difference between the Triton decode kernels and the torch reference (3 seqs)."""
    q, kc, vc, tables, lens = make_batch(3, context, device, dtype, head_dim)
    if device == "cuda":
        assert decode_backend(q, kc, vc) == "triton", "the dispatcher would not take Triton"
    out = paged_decode(q, kc, vc, tables, lens, backend="triton").float()
    return (out - reference_decode(q, kc, vc, tables, lens).float()).abs().max().item()


def make_prefill(seq_len: int, new: int, device: str, dtype: torch.dtype):
    """One sequence of `seq_len` tokens in shuffled blocks, its last `new` to be computed."""
    blocks = -(-seq_len // BLOCK)
    k_cache = torch.randn(blocks + 8, BLOCK, KV_HEADS, HEAD_DIM, device=device, dtype=dtype)
    v_cache = torch.randn(blocks + 8, BLOCK, KV_HEADS, HEAD_DIM, device=device, dtype=dtype)
    table = torch.randperm(blocks + 8, device=device)[:blocks].to(torch.int32)
    q = torch.randn(new, Q_HEADS, HEAD_DIM, device=device, dtype=dtype)
    return q, k_cache, v_cache, table


def prefill_error(device: str, dtype: torch.dtype, seq_len: int, new: int) -> float:
    """Largest difference between the Triton prefill kernel and the torch reference."""
    q, kc, vc, table = make_prefill(seq_len, new, device, dtype)
    if device == "cuda":
        assert prefill_backend(q, kc, vc) == "triton", "the dispatcher would not take Triton"
    out = paged_prefill(q, kc, vc, table, seq_len, backend="triton").float()
    return (out - reference_prefill(q, kc, vc, table, seq_len).float()).abs().max().item()


def flex_error(device: str, dtype: torch.dtype, compiled: bool) -> float | str:
    """FlexAttention over the page table against paged_decode; the error text if flex fails."""
    q, kc, vc, tables, lens = make_batch(3, 256, device, dtype)
    try:
        out = flex_paged_decode(q, kc, vc, tables, lens, compiled=compiled).float()
    except Exception as err:  # a peer that cannot run here is reported, not fatal
        return f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
    want = paged_decode(q, kc, vc, tables, lens).float()
    return (out - want).abs().max().item()


def engine_matches_dense(device: str) -> bool:
    """The tiny fp32 model served by the engine (preempting in 12 blocks) on `device` gives
    the greedy tokens of decoding without any cache."""
    model = TinyLM(seed=0).to(device)
    prompts = [list(range(10 + i, 40 + 3 * i)) for i in range(4)]
    engine = Engine(model, num_blocks=12, block_size=16)
    out = engine.generate(prompts, 16)
    return [c.token_ids for c in out] == [greedy_dense(model, p, 16) for p in prompts]


def engine_tokens_per_s(device: str, requests: int, new_tokens: int) -> float:
    """Generated tokens per second of the engine serving the tiny model on `device`."""
    model = TinyLM(seed=0).to(device)
    prompts = [list(range(5 + i % 50, 60 + i % 50)) for i in range(requests)]
    Engine(model, num_blocks=512, block_size=16).generate(prompts[:2], 2)  # warm up
    engine = Engine(model, num_blocks=512, block_size=16)
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    engine.generate(prompts, new_tokens)
    if device == "cuda":
        torch.cuda.synchronize()
    return requests * new_tokens / (time.perf_counter() - start)


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
    grid = [(1, 1024), (8, 1024), (64, 4096), (32, 8192)] if not args.smoke else [(1, 64), (2, 64)]
    goal_point = (64, 4096) if not args.smoke else (2, 64)
    flex_points = {(8, 1024), (64, 4096)} if not args.smoke else {(2, 64)}
    long_context = 32_768 if not args.smoke else 256
    prefill_shape = (4096, 1024) if not args.smoke else (48, 16)  # tokens, new after a hit
    repeats = REPEATS if not args.smoke else 2
    compiled_flex = device == "cuda"  # eager flex materialises every score: CPU smoke only

    def report(line: str) -> None:  # a smoke run checks the script; its timings mean nothing
        if not args.smoke:
            print(line)

    # 1. Correctness first: every output that is timed below is checked here.
    dtypes = [torch.float16, torch.bfloat16, torch.float32] if device == "cuda" else [dtype]
    limits = {torch.float16: 2e-2, torch.bfloat16: 5e-2, torch.float32: 1e-5}  # fp32: exact dots
    small = 1024 if not args.smoke else 48
    errors = {
        f"decode {str(t)[6:]} d{d}": decode_error(device, t, d, small)
        for t in dtypes
        for d in (HEAD_DIM, 80)
    }
    errors |= {f"prefill {str(t)[6:]}": prefill_error(device, t, small, small // 2) for t in dtypes}
    print(f"Triton kernels vs reference, max abs difference: {errors}")
    bad = [k for k, e in errors.items() if not e < limits[getattr(torch, k.split()[1])]]
    assert not bad, f"outside the tolerance: {bad}"
    flex = flex_error(device, dtype, compiled_flex)
    print(f"FlexAttention ({'compiled' if compiled_flex else 'eager'}) vs paged_decode: {flex}")
    flex_ok = isinstance(flex, float) and flex < limits[dtype]
    if isinstance(flex, float):
        assert flex_ok, f"FlexAttention differs from paged_decode by {flex}"
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
        fns = {
            "kernel": lambda q=q, kc=kc, vc=vc, t=tables, n=lens: paged_decode(q, kc, vc, t, n),
            "sdpa": lambda q=q, kd=kd, vd=vd: F.scaled_dot_product_attention(
                q[:, :, None], kd, vd, enable_gqa=True
            ),
            "copy": lambda: big.clone(),
        }
        if flex_ok and (batch, context) in flex_points:
            mask = paged_block_mask(tables, lens, kc.shape[0], BLOCK)  # built once, as per layer
            fns["flex"] = lambda q=q, kc=kc, vc=vc, t=tables, n=lens, m=mask: flex_paged_decode(
                q, kc, vc, t, n, block_mask=m, compiled=compiled_flex
            )
        times = in_turn(device, fns, repeats)
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
            "flex_ms": median(times["flex"]) if "flex" in times else None,
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
        flex_note = f", flex {span(times['flex'])} ms" if "flex" in times else ""
        report(
            f"batch {batch:>3} context {context:>6}: kernel {span(times['kernel'])} ms "
            f"({row['kernel_gb_s']:.0f} GB/s, {row['share_of_copy_bandwidth']:.0%} of copy), "
            f"SDPA {span(times['sdpa'])} ms, ratio {span(ratio, 2)}{flex_note}"
        )
    report(f"device-to-device copy, all points: {span(copy_runs, 0)} GB/s")
    at_goal = next(r for r in rows if (r["batch"], r["context"]) == goal_point)
    goals = {
        "share_of_copy_at_64x4k": at_goal["share_of_copy_bandwidth"],
        "share_goal_met": at_goal["share_of_copy_bandwidth"] >= 0.70,
        "paged_over_sdpa_at_64x4k": at_goal["paged_over_sdpa"],
        "ratio_goal_met": at_goal["paged_over_sdpa"] <= 1.1,
    }
    report(
        f"goals at batch {goal_point[0]} x {goal_point[1]}: "
        f"{goals['share_of_copy_at_64x4k']:.0%} of copy bandwidth (goal >= 70%: "
        f"{'met' if goals['share_goal_met'] else 'NOT met'}), paged/SDPA "
        f"{goals['paged_over_sdpa_at_64x4k']:.2f}x (goal <= 1.1x: "
        f"{'met' if goals['ratio_goal_met'] else 'NOT met'})"
    )

    # 3. Prefill after a prefix hit: the Triton kernel, the gathering reference it replaces on
    #    the GPU, and SDPA on the same K/V made contiguous (a boolean causal-with-offset mask).
    seq_len, new = prefill_shape
    q, kc, vc, table = make_prefill(seq_len, new, device, dtype)
    kd = kc[table.long()].flatten(0, 1)[:seq_len].transpose(0, 1)[None].contiguous()  # [1,kv,T,d]
    vd = vc[table.long()].flatten(0, 1)[:seq_len].transpose(0, 1)[None].contiguous()
    visible = torch.ones(new, seq_len, dtype=torch.bool, device=device).tril(seq_len - new)
    prefill_times = in_turn(
        device,
        {
            "kernel": lambda: paged_prefill(q, kc, vc, table, seq_len),
            "reference": lambda: reference_prefill(q, kc, vc, table, seq_len),
            "sdpa": lambda: F.scaled_dot_product_attention(
                q.transpose(0, 1)[None], kd, vd, attn_mask=visible, enable_gqa=True
            ),
        },
        repeats,
    )
    prefill_row = {
        "tokens": seq_len,
        "new": new,
        **{f"{k}_ms": median(v) for k, v in prefill_times.items()},
        "kernel_over_sdpa": median(
            [k / s for k, s in zip(prefill_times["kernel"], prefill_times["sdpa"], strict=True)]
        ),
    }
    report(
        f"prefill of {new} new tokens after {seq_len - new} cached: kernel "
        f"{span(prefill_times['kernel'])} ms, gathering reference "
        f"{span(prefill_times['reference'])} ms, SDPA (contiguous, masked) "
        f"{span(prefill_times['sdpa'])} ms"
    )

    # 4. Split-K at batch 1 with a long context, one slice and the ruled split in turn.
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

    # 5. The engine end to end (tiny fp32 model: scheduling and launches dominate).
    engine_tps = engine_tokens_per_s(
        device, 64 if not args.smoke else 2, 32 if not args.smoke else 2
    )
    report(f"engine, tiny model, 64 requests x 32 tokens: {engine_tps:.0f} tokens/s")

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
                "flex_vs_paged_decode": flex,
                "engine_matches_dense": engine_ok,
                "copy_gb_s": median(copy_runs),
                "goals": goals,
                "rows": rows,
                "prefill": prefill_row,
                "engine_tokens_per_s": engine_tps,
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
