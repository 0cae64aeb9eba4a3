"""Compile every Triton kernel variant the dispatcher can launch for sm_80 and sm_90, no GPU needed.

    python tools/triton_aot_report.py [--only decode/float16] [--targets sm_90] [--save]

Each variant (kernel x cache dtype x padded head dimension x block-size class; see
paged_kv/attention/triton_shapes.py) is compiled down to a cubin in a fresh Triton cache, and
its registers and spills (`ptxas -v`), shared memory and warps are printed as one table; with
`--save` (and no `--only`/`--targets`) they go to bench/results/triton_aot.json, which
chapter 05 shows. Exits non-zero if any variant fails to compile. The full set takes several
minutes on 2 cores; tests/test_triton_aot.py compiles a stratified subset in CI.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

if os.environ.get("TRITON_INTERPRET") == "1":
    sys.exit("unset TRITON_INTERPRET: ahead-of-time compilation needs the real compiler")

import triton  # noqa: E402
from results_file import add_save_flag, write_results  # noqa: E402
from triton import knobs  # noqa: E402
from triton.backends.nvidia.compiler import get_ptxas  # noqa: E402

from paged_kv.attention.triton_aot import TARGETS, compile_variant  # noqa: E402
from paged_kv.attention.triton_shapes import (  # noqa: E402
    BLOCK_CLASSES,
    DTYPES,
    GROUP_CLASSES,
    HEAD_DIM_WIDTHS,
    all_variants,
)


def table(rows: list[dict], targets: list[str]) -> str:
    """One line per variant; per target: registers, spill bytes, shared KB. Then warps."""
    by_variant: dict[str, dict[str, dict]] = {}
    for row in rows:
        by_variant.setdefault(row["variant"], {})[row["target"]] = row
    head = f"{'variant':<28}" + "".join(f"{t + ' regs/spill/shared KB':>27}" for t in targets)
    lines = [head + f"{'warps':>7}"]
    for name, per_target in by_variant.items():
        cells, warps = [], "-"
        for target in targets:
            row = per_target.get(target)
            if row is None or "error" in row:
                cells.append(f"{'-' if row is None else 'FAILED':>27}")
                continue
            spill = row["spill_stores"] + row["spill_loads"]
            cell = f"{row['registers']}/{spill}/{row['shared_bytes'] / 1024:.1f}"
            cells.append(f"{cell:>27}")
            warps = row["num_warps"]
        lines.append(f"{name:<28}" + "".join(cells) + f"{warps:>7}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="compile only variants whose name has this")
    parser.add_argument("--targets", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    add_save_flag(parser, "triton_aot")
    args = parser.parse_args()
    partial = bool(args.only) or args.targets != list(TARGETS)
    if args.save and partial:
        parser.error("--save writes the full set only (drop --only / --targets)")
    warnings.filterwarnings("ignore")  # Triton's notice about the default of FP fusion
    knobs.cache.dir = tempfile.mkdtemp(prefix="triton-aot-")  # compile for real, every time

    variants = [v for v in all_variants() if args.only in v.name]
    rows, start = [], time.perf_counter()
    for i, variant in enumerate(variants, 1):
        for target in args.targets:
            rows.append(compile_variant(variant, target))
        print(f"\r{i}/{len(variants)} compiled", end="", file=sys.stderr, flush=True)
    total = time.perf_counter() - start
    print(file=sys.stderr)
    print(table(rows, args.targets))
    failed = [f"{r['variant']} {r['target']}: {r['error']}" for r in rows if "error" in r]
    spilling = [
        f"{r['variant']} {r['target']}"
        for r in rows
        if "error" not in r and r["spill_stores"] + r["spill_loads"]
    ]
    print(f"\n{len(rows) - len(failed)} of {len(rows)} compiled in {total:.0f} s; ", end="")
    print(f"{len(spilling)} spill registers" + (f": {', '.join(spilling)}" if spilling else ""))
    for line in failed:
        print("FAILED", line)
    if args.save:
        ptxas = {
            t: subprocess.run(
                [get_ptxas(TARGETS[t].arch).path, "--version"], capture_output=True, text=True
            )
            .stdout.strip()
            .splitlines()[-1]
            for t in args.targets
        }
        write_results(
            "triton_aot",
            {
                "triton": triton.__version__,
                "ptxas": ptxas,
                "targets": args.targets,
                "classes": {
                    "dtype": [str(d).removeprefix("torch.") for d in DTYPES],
                    "head_dim_width": list(HEAD_DIM_WIDTHS),
                    "block_class": list(BLOCK_CLASSES),
                    "group_class": list(GROUP_CLASSES),
                },
                "compile_s_total": round(total, 1),
                "compiled": len(rows) - len(failed),
                "failed": failed,
                "spilling": spilling,
                "rows": rows,
            },
        )
    elif not partial:
        print("\n(not saved; pass --save to write bench/results/triton_aot.json)")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
