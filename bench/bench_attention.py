"""Paged decode attention against contiguous SDPA on the same data, on this machine's CPU.

Prints a table; writes bench/results/attention_cpu.json only with --save. Usage:
    python bench/bench_attention.py [--quick] [--threads N] [--save]
For each batch x context point: K/V of every sequence sit in shuffled 16-token blocks; the
paged side reads them through block tables, SDPA reads the same values laid out contiguously
([batch, kv_heads, context, dim], SDPA with enable_gqa). Paged is `paged_decode` (the C++
kernel when it builds, column "path") and, for comparison, the torch reference. All three are
timed in the same run, taking turns, with torch's thread count pinned (`--threads`, 1 by
default); each figure is the median of the runs (at least 5) and each ratio the median of the
per-run ratios, with their min–max. This machine's timings vary from run to run: compare ratios.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from measure import MIN_RUNS, pin_threads, spread
from results_file import add_save_flag, save_or_say

from paged_kv.attention import cpu_decode, paged_decode, reference_decode

Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK = 32, 8, 128, 16


def in_turn(fns: dict[str, Callable[[], torch.Tensor]], repeats: int) -> dict[str, list[float]]:
    """Wall times in ms of each function, running them in turn `repeats` times.

    Taking turns spreads any background load over all of them alike.
    """
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()  # warm up
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1e3)
    return times


def point(batch: int, context: int, repeats: int) -> dict:
    gen = torch.Generator().manual_seed(0)
    blocks = batch * context // BLOCK
    k_cache = torch.randn(blocks, BLOCK, KV_HEADS, HEAD_DIM, generator=gen)
    v_cache = torch.randn(blocks, BLOCK, KV_HEADS, HEAD_DIM, generator=gen)
    tables = torch.randperm(blocks, generator=gen).view(batch, context // BLOCK)
    lens = torch.full((batch,), context)
    q = torch.randn(batch, Q_HEADS, HEAD_DIM, generator=gen)
    # The same keys and values, contiguous: [batch, kv_heads, context, dim].
    k = k_cache[tables].reshape(batch, context, KV_HEADS, HEAD_DIM).transpose(1, 2).contiguous()
    v = v_cache[tables].reshape(batch, context, KV_HEADS, HEAD_DIM).transpose(1, 2).contiguous()
    fns = {
        "paged": lambda: paged_decode(q, k_cache, v_cache, tables, lens),
        "reference": lambda: reference_decode(q, k_cache, v_cache, tables, lens),
        "sdpa": lambda: F.scaled_dot_product_attention(q[:, :, None], k, v, enable_gqa=True)[
            :, :, 0
        ],
    }
    want = fns["sdpa"]()
    assert all(torch.allclose(fn(), want, atol=1e-4) for fn in fns.values())
    times = in_turn(fns, repeats)
    path = "cpp" if cpu_decode.handles(q, k_cache, v_cache) else "reference"
    ms = {name: spread(t) for name, t in times.items()}
    ratio = spread([p / s for p, s in zip(times["paged"], times["sdpa"], strict=True)])
    ref_ratio = spread([r / s for r, s in zip(times["reference"], times["sdpa"], strict=True)])
    return {"batch": batch, "context": context, "path": path,
            "paged_ms": ms["paged"]["median"], "reference_ms": ms["reference"]["median"],
            "sdpa_ms": ms["sdpa"]["median"], "ratio": ratio["median"],
            "ratio_spread": [ratio["min"], ratio["max"]],
            "reference_ratio": ref_ratio["median"],
            "reference_ratio_spread": [ref_ratio["min"], ref_ratio["max"]],
            "ms_spread": {name: [m["min"], m["max"]] for name, m in ms.items()}}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smaller grid")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    add_save_flag(parser, "attention_cpu")
    args = parser.parse_args()
    threads = pin_threads(args.threads)
    batches = [1, 8] if args.quick else [1, 4, 16]
    contexts = [256, 1024] if args.quick else [256, 1024, 4096]
    repeats = MIN_RUNS if args.quick else 9
    rows = []
    print(f"median of {repeats} runs in turn; ratios: median of per-run ratios (min–max)")
    print(f"{'batch':>5} {'context':>7} {'path':>9} {'paged ms':>9} {'SDPA ms':>8} "
          f"{'paged/SDPA':>17} {'ref ms':>7} {'ref/SDPA':>17}")  # fmt: skip
    for b in batches:
        for c in contexts:
            r = point(b, c, repeats)
            rows.append(r)
            lo, hi = r["ratio_spread"]
            rlo, rhi = r["reference_ratio_spread"]
            print(f"{b:>5} {c:>7} {r['path']:>9} {r['paged_ms']:>9.2f} {r['sdpa_ms']:>8.2f} "
                  f"{r['ratio']:>6.2f} ({lo:.2f}–{hi:.2f}) {r['reference_ms']:>7.2f} "
                  f"{r['reference_ratio']:>6.2f} ({rlo:.2f}–{rhi:.2f})")  # fmt: skip
    save_or_say(
        args.save,
        "attention_cpu",
        {
            "shape": {
                "q_heads": Q_HEADS,
                "kv_heads": KV_HEADS,
                "head_dim": HEAD_DIM,
                "block_size": BLOCK,
                "dtype": "float32",
            },
            "unit": f"ms, median of {repeats} runs in turn; ratios: median of per-run ratios",
            "torch_threads": threads,
            "quick": args.quick,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
