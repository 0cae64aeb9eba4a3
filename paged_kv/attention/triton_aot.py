"""Ahead-of-time compilation of the Triton kernels for GPU targets, on a machine without a GPU.

For a variant (`triton_shapes.Variant`) we build a call of its class out of meta tensors (shapes,
dtypes and strides, no memory), let the launcher plan it (`plan_decode` / `plan_prefill`, the
same code a real call runs), and hand its arguments to Triton's own binder for the target: that
yields the signature, constants and specialisation attributes Triton would compile on that GPU.
`triton.compile` then runs the whole pipeline down to a cubin (ptxas ships with triton), and
`ptxas -v` on the PTX reports registers and spills; shared memory is in the kernel's metadata.

`tools/triton_aot_report.py` compiles every variant for sm_80 and sm_90 and writes the table;
`tests/test_triton_aot.py` compiles a stratified subset in CI. Uses Triton 3.x internals
(`create_function_from_signature`, `JITFunction._pack_args`): pinned by those tests.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time

import torch
from triton import compile as triton_compile
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptxas
from triton.compiler import ASTSource
from triton.compiler.compiler import make_backend
from triton.runtime.jit import create_function_from_signature

from paged_kv.attention.triton_decode import Launch, plan_decode
from paged_kv.attention.triton_prefill import plan_prefill
from paged_kv.attention.triton_shapes import Variant, decode_tile, prefill_tiles

TARGETS = {"sm_80": GPUTarget("cuda", 80, 32), "sm_90": GPUTarget("cuda", 90, 32)}


def meta_call(
    kernel: str,
    dtype: torch.dtype,
    head_dim: int,
    block_size: int,
    group: int = 4,
    num_kv_heads: int = 2,
) -> list[Launch]:
    """The launches of a decode ("decode" and "merge") or prefill call of these sizes, planned
    on meta tensors: 2 sequences of 64 tokens (decode) or 40 new after 64 cached (prefill)."""
    meta = torch.device("meta")
    blocks = -(-128 // block_size)
    cache = torch.empty(4 * blocks, block_size, num_kv_heads, head_dim, dtype=dtype, device=meta)
    heads = num_kv_heads * group
    if kernel in ("decode", "merge"):
        q = torch.empty(2, heads, head_dim, dtype=dtype, device=meta)
        tables = torch.empty(2, blocks, dtype=torch.int32, device=meta)
        lens = torch.empty(2, dtype=torch.int32, device=meta)
        launches, _ = plan_decode(q, cache, cache, tables, lens)
        return launches
    q = torch.empty(40, heads, head_dim, dtype=dtype, device=meta)
    table = torch.empty(blocks, dtype=torch.int32, device=meta)
    launches, _ = plan_prefill(q, cache, cache, table, 104)
    return launches


def representative(variant: Variant) -> Launch:
    """One launch of this variant's class (head_dim = the padded width)."""
    if variant.kernel == "prefill":
        tile = prefill_tiles(variant.dtype, variant.width)[1]
    else:
        tile = decode_tile(variant.dtype, variant.width)
    block_size = 2 * tile if variant.block_class == "whole" else 1
    launches = meta_call(variant.kernel, variant.dtype, variant.width, block_size)
    return launches[1] if variant.kernel == "merge" else launches[0]


def compile_key(launch: Launch, target: GPUTarget) -> tuple[dict, dict, dict, dict]:
    """(signature, constants, attributes, options) Triton's launcher would compile for `launch`
    on `target`: what makes two calls share a binary."""
    kernel = launch.kernel
    if not hasattr(kernel, "_pack_args"):
        raise RuntimeError("ahead-of-time compilation needs TRITON_INTERPRET unset")
    backend = make_backend(target)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    kwargs = dict(launch.constants)
    kwargs["debug"] = kernel.debug or knobs.runtime.debug  # as JITFunction.run adds them
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    kwargs["fpsan_homomorphic_casts"] = knobs.compilation.fpsan_homomorphic_casts
    bound, specialization, options = binder(*launch.args, **kwargs)
    options, signature, constants, attrs = kernel._pack_args(
        backend, kwargs, bound, specialization, options
    )
    return signature, constants, attrs, options.__dict__


def compile_launch(launch: Launch, target: GPUTarget):
    """Compile `launch`'s variant for `target` down to a cubin; returns Triton's CompiledKernel."""
    signature, constants, attrs, options = compile_key(launch, target)
    source = ASTSource(launch.kernel, signature, constants, attrs)
    return triton_compile(source, target=target, options=options)


def ptxas_usage(ptx: str, target: GPUTarget) -> dict[str, int]:
    """Registers, spill stores/loads (bytes) and stack frame (bytes) from `ptxas -v`."""
    target_line = re.search(r"^\.target\s+(\w+)", ptx, re.MULTILINE)
    assert target_line is not None  # triton's PTX always names its target
    arch = target_line.group(1)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        log = subprocess.run(
            [get_ptxas(int(target.arch)).path, "-v", f"--gpu-name={arch}", path, "-o", os.devnull],
            capture_output=True,
            text=True,
            check=True,
        ).stderr

    def number(pattern: str) -> int:
        found = re.search(pattern, log)
        return int(found.group(1)) if found else 0

    return {
        "registers": number(r"Used (\d+) registers"),
        "spill_stores": number(r"(\d+) bytes spill stores"),
        "spill_loads": number(r"(\d+) bytes spill loads"),
        "stack": number(r"(\d+) bytes stack frame"),
    }


def compile_variant(variant: Variant, target_name: str) -> dict:
    """Compile one variant for one target; its resources and compile time, or its error."""
    target = TARGETS[target_name]
    record: dict[str, object] = {"variant": variant.name, "target": target_name}
    start = time.perf_counter()
    try:
        compiled = compile_launch(representative(variant), target)
    except Exception as error:  # a variant that does not compile is the finding
        record["error"] = f"{type(error).__name__}: {str(error)[:500]}"
        record["compile_s"] = round(time.perf_counter() - start, 2)
        return record
    record["compile_s"] = round(time.perf_counter() - start, 2)
    record.update(ptxas_usage(compiled.asm["ptx"], target))
    record["shared_bytes"] = compiled.metadata.shared
    record["num_warps"] = compiled.metadata.num_warps
    record["num_stages"] = compiled.metadata.num_stages
    return record
