# triton.compiler.compiler: compiling a kernel for a target, ahead of time.

from collections.abc import Mapping
from typing import Any

from triton.backends.compiler import BaseBackend, GPUTarget

class ASTSource:
    def __init__(
        self,
        fn: Any,
        signature: dict[str, Any],
        constexprs: dict[Any, Any] | None = None,
        attrs: dict[Any, Any] | None = None,
    ) -> None: ...

class CompiledKernel:
    asm: Mapping[str, Any]  # "ptx", "cubin", ...: text or bytes by stage
    metadata: Any  # a namedtuple built from the compile's JSON (shared, num_warps, ...)

def compile(
    src: ASTSource, target: GPUTarget | None = None, options: dict[str, Any] | None = None
) -> CompiledKernel: ...
def make_backend(target: GPUTarget) -> BaseBackend: ...
