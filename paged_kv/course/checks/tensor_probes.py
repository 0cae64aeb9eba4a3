"""Tensor probes: the learner's function and the library's reference on the same inputs, one
cause named from what they show, in this order: an input tensor changed in place; the output's
type, shape, dtype; a `hard` case's cause when the case without its last line (the difficulty:
scores of ±800, half precision) passes; NaN or inf where the reference is finite; an output
equal to a named mistake's; else `wrong_result`. `live_tensor_bytes` and `BlockReads` probe
how the answer works (the tiles it keeps, the copies it takes of a cache)."""

from __future__ import annotations

import contextlib
import gc
import math
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

import torch

import paged_kv.attention
from paged_kv.course.checks import causes
from paged_kv.course.checks.failures import CheckFailed, call, short_repr, stage

# float32 sums of a few dozen terms stay well inside these; float16 accumulation does not
TOLERANCE = {torch.float64: 1e-7, torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}
Inputs = dict[str, Any]
Reference = Callable[[Inputs], Any]
_ATTENTION = os.path.dirname(paged_kv.attention.__file__) + os.sep


@dataclass(frozen=True)
class Case:
    """`code` builds the inputs (the replay); `hint`: what to do when the case fails (but with
    a named mistake); `hard`: the cause when it fails and passes without its last line."""

    what: str
    code: str
    hint: str = ""
    hard: str = ""


def build(code: str) -> Inputs:
    names: Inputs = {"torch": torch, "math": math}
    exec(code, names)  # the check's own case code
    return names


def difference(got: Any, want: Any) -> tuple[str, str, str] | None:
    """(cause, what the learner's output shows, what the reference's does), or None when they
    agree. Tuples are compared item by item (the first item that differs speaks)."""
    if isinstance(want, tuple):
        if not isinstance(got, tuple | list) or len(got) != len(want):
            return causes.WRONG_RESULT, short_repr(got), f"a tuple of {len(want)} tensors"
        for i, found in enumerate(map(difference, got, want)):
            if found:
                return found[0], f"item {i} {found[1]}", f"item {i} {found[2]}"
        return None
    if not isinstance(got, torch.Tensor):
        return causes.WRONG_RESULT, short_repr(got), "a tensor"
    if got.shape != want.shape:
        return causes.WRONG_SHAPE, f"shape {tuple(got.shape)}", f"shape {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return causes.WRONG_DTYPE, str(got.dtype), str(want.dtype)
    mine, theirs, tol = got.detach().double(), want.detach().double(), TOLERANCE[want.dtype]
    finite = torch.isfinite(theirs)
    if not torch.isfinite(mine[finite]).all():
        return causes.NOT_FINITE, _shown(mine), _shown(theirs)
    if torch.allclose(mine, theirs, rtol=tol, atol=tol):
        return None
    off = (mine - theirs).abs().nan_to_num(0.0, posinf=math.inf)  # (-inf where -inf is right)
    at = f" at {[int(i) for i in torch.unravel_index(off.argmax(), off.shape)]}" * (off.dim() > 0)
    shown = f"{_shown(mine)} (off by {off.max():.2g}{at}, allowed {tol:g})"
    return causes.WRONG_RESULT, shown, _shown(theirs)


def _shown(t: torch.Tensor) -> str:
    values = [round(v, 5) if math.isfinite(v) else v for v in t.flatten()[:8].tolist()]
    return f"{values if t.dim() else values[0]}{f' … ({t.numel()} values)' * (t.numel() > 8)}"


def judge(
    fn: Callable[..., Any],
    case: Case,
    line: str,
    reference: Reference,
    *,
    variants: Iterable[tuple[str, Reference]] = (),
    watch: Callable[[Inputs], Inputs] = dict,
) -> None:
    """Call `fn` as `line` on `case`'s inputs (as `watch(inputs)` gives them, to probe how `fn`
    works) and compare with `reference(inputs)`; raise CheckFailed with one cause if they
    differ. `variants`: (cause, what that mistake gives as the output's first item)."""

    def outcome(code: str) -> tuple[tuple[str, str, str] | None, Any]:
        inputs, fresh, doing = build(code), build(code), f"{line} on {case.what}"
        with stage(doing):  # the arguments are the line's own, evaluated among the inputs
            got = call(doing, fn, *eval(f"({line.partition('(')[2][:-1]},)", watch(inputs)))
        for name, given in inputs.items():  # (NaN in a cache is NaN in its fresh copy)
            was = fresh[name]
            if isinstance(given, torch.Tensor) and not (
                given.shape == was.shape and given.allclose(was, 0, 0, equal_nan=True)
            ):
                return (causes.MUTATES_ARGUMENT, _shown(given), f"`{name}` {_shown(was)}"), got
        return difference(got, reference(fresh)), got

    found, output = outcome(case.code)
    if found is None:
        return
    (cause, got, want), hint = found, case.hint
    if cause == causes.MUTATES_ARGUMENT:
        hint = "An in-place op (mul_, zero_, -=; .float() of a float32 tensor is that tensor) "
        hint += "changed the caller's tensor: compute into new tensors"
    elif cause in (causes.WRONG_RESULT, causes.NOT_FINITE):
        if case.hard and outcome(case.code.rpartition("\n")[0])[0] is None:
            cause, hint = case.hard, f"The same case without its last line passes. {case.hint}"
        else:  # a named mistake only when its output is what the learner's first item shows
            inputs, first = build(case.code), output[0] if isinstance(output, tuple) else output
            right = reference(inputs)
            if difference(first, right[0] if isinstance(right, tuple) else right):
                named = [m for m, wrong in variants if difference(first, wrong(inputs)) is None]
                cause, hint = (named[0], "") if named else (cause, hint)
    fail(cause, case, line, hint, got=got, want=want, when="after the call")


def fail(cause: str, case: Case, line: str, hint: str, **fields: object) -> NoReturn:
    replay = "\n".join("    " + text for text in [*case.code.strip().splitlines(), line])
    message = causes.say(cause, hint, line=line, **fields)
    raise CheckFailed(f"On {case.what}: {message}\nReplay it:\n{replay}", cause)


def live_tensor_bytes() -> int:
    """Bytes of the distinct storages of every tensor alive in the process (garbage collected
    first: tensors in unreachable cycles would come and go with the collector)."""
    gc.collect()
    storages: dict[int, int] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fake tensor (torch.compile's) warns or raises here
        for obj in gc.get_objects():
            if issubclass(type(obj), torch.Tensor) and obj.layout is torch.strided:
                # (sparse tensors have no storage, fake ones no data: none is a tile)
                with contextlib.suppress(RuntimeError, NotImplementedError, UserWarning):
                    storages[obj.untyped_storage().data_ptr()] = obj.untyped_storage().nbytes()
    return sum(storages.values())


class BlockReads(torch.Tensor):
    """A cache that records the largest tensor copied out of it (indexing with a list,
    `.float()` of a half cache...; views of it stay watched), and `library`: the outermost of
    the library's attention functions that touched it (the checks never hand it to one)."""

    largest, library = 0, ""

    @classmethod
    def __torch_function__(
        cls,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        for frame, _ in traceback.walk_stack(sys._getframe(1)):  # the outermost one names it
            if frame.f_code.co_filename.startswith(_ATTENTION):
                BlockReads.library = f"{frame.f_globals['__name__']}.{frame.f_code.co_name}"
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
            if not isinstance(out, torch.Tensor):
                return out
            watched = {a.untyped_storage().data_ptr() for a in args if isinstance(a, cls)}
            if out.untyped_storage().data_ptr() in watched:
                return out.as_subclass(cls)  # a view: still the cache
        BlockReads.largest = max(BlockReads.largest, out.numel())
        return out  # a copy: what is computed from it is not watched
