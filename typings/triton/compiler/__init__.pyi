from triton.compiler.compiler import ASTSource as ASTSource
from triton.compiler.compiler import CompiledKernel as CompiledKernel
from triton.compiler.compiler import compile as compile
from triton.compiler.compiler import make_backend as make_backend
