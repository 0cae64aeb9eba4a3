# triton.runtime.jit: the @triton.jit decorator and what it makes.

from collections.abc import Callable, Iterable
from inspect import Signature
from typing import Any, Generic, TypeVar, overload

from triton.backends.compiler import BaseBackend

_T = TypeVar("_T")

class JITFunction(Generic[_T]):
    # kernel[grid](*args, **constants) launches it
    def __getitem__(self, grid: Any) -> _T: ...

@overload
def jit(fn: _T) -> JITFunction[_T]: ...
@overload
def jit(
    *,
    do_not_specialize: Iterable[int | str] | None = None,
    do_not_specialize_on_alignment: Iterable[int | str] | None = None,
    debug: bool | None = None,
    noinline: bool | None = None,
) -> Callable[[_T], JITFunction[_T]]: ...

# The binder of a kernel's parameters: (bound arguments, specialisation, options).
def create_function_from_signature(
    sig: Signature, kparams: list[Any], backend: BaseBackend
) -> Callable[..., tuple[Any, Any, Any]]: ...
