"""Paged decode attention against contiguous SDPA on the same data, on this machine's CPU.

Prints a table and writes bench/results/attention_cpu.json. Usage:
    python bench/bench_attention.py [--quick]
For each batch x context point: K/V of every sequence sit in shuffled 16-token blocks; the
paged torch reference reads them through block tables, SDPA reads the same values laid out
contiguously ([batch, kv_heads, context, dim], SDPA with enable_gqa). Figures are the
fastest of several runs; this machine's timings vary from run to run, so compare ratios.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from results_file import write_results

from paged_kv.attention import reference_decode

Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK = 32, 8, 128, 16


def timed(fn, repeats: int) -> float:
    fn()  # warm up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


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

    def paged():
        return reference_decode(q, k_cache, v_cache, tables, lens)

    def dense():
        return F.scaled_dot_product_attention(q[:, :, None], k, v, enable_gqa=True)[:, :, 0]

    assert torch.allclose(paged(), dense(), atol=1e-4)
    t_paged, t_dense = timed(paged, repeats), timed(dense, repeats)
    return {"batch": batch, "context": context, "paged_ms": t_paged * 1e3,
            "sdpa_ms": t_dense * 1e3, "ratio": t_paged / t_dense}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smaller grid")
    args = parser.parse_args()
    batches = [1, 8] if args.quick else [1, 4, 16]
    contexts = [256, 1024] if args.quick else [256, 1024, 4096]
    repeats = 3 if args.quick else 5
    rows = []
    print(f"{'batch':>5} {'context':>7} {'paged ms':>9} {'SDPA ms':>8} {'paged/SDPA':>10}")
    for b in batches:
        for c in contexts:
            r = point(b, c, repeats)
            rows.append(r)
            print(f"{b:>5} {c:>7} {r['paged_ms']:>9.2f} {r['sdpa_ms']:>8.2f} {r['ratio']:>10.2f}")
    write_results(
        "attention_cpu",
        {
            "shape": {
                "q_heads": Q_HEADS,
                "kv_heads": KV_HEADS,
                "head_dim": HEAD_DIM,
                "block_size": BLOCK,
                "dtype": "float32",
            },
            "quick": args.quick,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
