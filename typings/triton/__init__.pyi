# Type stubs for the part of Triton that paged_kv uses, so that pyright checks the same thing
# with triton installed (`./setup.sh triton`, a CUDA torch) and without it (`./setup.sh`).
# pyright reads them through `stubPath` ([tool.pyright] in pyproject.toml), before any
# installed triton. tests/test_triton_stubs.py checks every name and parameter here against
# the installed triton. Values inside a kernel (`tl.*`) are `Any`, as Triton's own annotations
# leave them; the host-side API is typed.

from triton import language as language
from triton.compiler import compile as compile
from triton.runtime.jit import jit as jit

__version__: str

def cdiv(x: int, y: int) -> int: ...
