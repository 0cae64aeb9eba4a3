"""Tensor probes: the learner's function and the library's reference on the same inputs, one
cause named from what the output shows.

A `Case` is the Python that builds the inputs; the check's `line` (`lse_merge(outs, lses)`)
calls the learner's function on them, and the two are the replay. The cause, in order: an
input tensor changed in place (`mutates_argument`); the output's type, shape, dtype; for a
case with a `hard` cause, that cause when the case without its last line (the difficulty:
scores of ±800, half precision) passes; NaN or inf where the reference is finite
(`not_finite`); an output equal to a named mistake's (`variants`); else `wrong_result`.
Probes of how the answer works: `tiles_held` (tensor bytes alive while tiles stream) and
`BlockReads` (the largest copy taken from a cache, and the library's code touching it).
"""

from __future__ import annotations

import gc
import math
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
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
_IN_PLACE = (
    "An in-place op (mul_, zero_, -=; .float() of a float32 tensor is that tensor) changed "
    "the caller's tensor: compute into new tensors"
)


@dataclass(frozen=True)
class Case:
    """`code` builds the inputs; `hint` says what to do when the case fails (but with a named
    mistake); `hard` is the cause when it fails and passes without its last line."""

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
    err = (mine - theirs)[finite].abs().max().item() if finite.any() else math.inf
    return causes.WRONG_RESULT, f"{_shown(mine)} (off by {err:.2g}, allowed {tol:g})", _shown(theirs)  # fmt: skip


def _shown(t: torch.Tensor) -> str:
    values = [round(v, 5) if math.isfinite(v) else v for v in t.flatten()[:8].tolist()]
    return f"{values if t.dim() else values[0]}" + (f" … ({t.numel()} values)" if t.numel() > 8 else "")  # fmt: skip


def judge(fn: Callable[..., Any], case: Case, line: str, reference: Reference, *,
          variants: Iterable[tuple[str, Reference]] = (),
          watch: Callable[[Inputs], Inputs] = dict) -> None:  # fmt: skip
    """Call `fn` as `line` on `case`'s inputs (as `watch(inputs)` gives them, for a probe of how
    `fn` works) and compare with `reference(inputs)`; raise CheckFailed with one cause if they
    differ. `variants`: (cause, what that mistake gives as the output's first item)."""

    def outcome(code: str) -> tuple[tuple[str, str, str] | None, Any]:
        inputs, fresh, doing = build(code), build(code), f"{line} on {case.what}"
        with stage(doing):  # the arguments are the line's own, evaluated among the inputs
            got = call(doing, fn, *eval(f"({line.partition('(')[2][:-1]},)", watch(inputs)))
        for name, given in inputs.items():
            if isinstance(given, torch.Tensor) and not _unchanged(given, fresh[name]):
                return (causes.MUTATES_ARGUMENT, _shown(given), f"`{name}` {_shown(fresh[name])}"), got  # fmt: skip
        return difference(got, reference(fresh)), got

    found, output = outcome(case.code)
    if found is None:
        return
    (cause, got, want), hint = found, _IN_PLACE if found[0] == causes.MUTATES_ARGUMENT else case.hint
    if cause in (causes.WRONG_RESULT, causes.NOT_FINITE):
        if case.hard and outcome(case.code.rpartition("\n")[0])[0] is None:
            cause, hint = case.hard, f"The same case without its last line passes. {case.hint}"
        else:
            inputs, first = build(case.code), _first(output)
            if difference(first, _first(reference(inputs))):  # (else item 0 is right)
                named = [m for m, wrong in variants if difference(first, wrong(inputs)) is None]
                cause, hint = (named[0], "") if named else (cause, hint)
    fail(cause, case, line, hint, got=got, want=want, when="after the call")


def _first(output: Any) -> Any:
    return output[0] if isinstance(output, tuple | list) and output else output


def _unchanged(given: torch.Tensor, fresh: torch.Tensor) -> bool:
    return given.shape == fresh.shape and torch.allclose(given, fresh, 0, 0, equal_nan=True)


def fail(cause: str, case: Case, line: str, hint: str, **fields: object) -> NoReturn:
    message = causes.say(cause, hint, line=line, **fields)
    replay = "\n".join("    " + text for text in [*case.code.strip().splitlines(), line])
    raise CheckFailed(f"On {case.what}: {message}\nReplay it:\n{replay}", cause)


# -- probes of how the answer works --------------------------------------------------------------


def _live_tensor_bytes() -> int:
    """Bytes of the distinct storages of every tensor alive in the process (garbage collected
    first: tensors in unreachable cycles would come and go with the collector)."""
    gc.collect()
    storages: dict[int, int] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fake tensor (torch.compile's) warns or raises here
        for obj in gc.get_objects():
            if issubclass(type(obj), torch.Tensor) and obj.layout is torch.strided:
                try:  # (sparse tensors have no storage, fake ones no data: none is a tile)
                    storages[obj.untyped_storage().data_ptr()] = obj.untyped_storage().nbytes()
                except (RuntimeError, NotImplementedError, UserWarning):
                    continue
    return sum(storages.values())


def tiles_held(tiles: Iterable[Any], early: int, late: int, into: list[int]) -> Iterator[Any]:
    """`tiles`, one at a time; appends to `into` the tensor bytes alive when tile `early` and
    tile `late` are handed out (an online pass holds the same; a kept tile or copy grows)."""
    for i, tile in enumerate(tiles):
        if i in (early, late):
            into.append(_live_tensor_bytes())
        yield tile
        del tile


_ATTENTION = os.path.dirname(paged_kv.attention.__file__) + os.sep


class BlockReads(torch.Tensor):
    """A cache that records the largest tensor copied out of it (indexing with a list,
    `.float()` of a half cache...: reading one block at a time keeps each within a block;
    views stay watched), and `library`: the outermost of the library's attention functions
    that touched it (the checks never hand it to the library: the learner's code did)."""

    largest, library = 0, ""

    @classmethod
    def __torch_function__(cls, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:  # fmt: skip
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename.startswith(_ATTENTION):
                BlockReads.library = f"{frame.f_globals['__name__']}.{frame.f_code.co_name}"
            frame = frame.f_back
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
            if not isinstance(out, torch.Tensor):
                return out
            watched = {a.untyped_storage().data_ptr() for a in args if isinstance(a, cls)}
            if out.untyped_storage().data_ptr() in watched:
                return out.as_subclass(cls)  # a view: still the cache
        BlockReads.largest = max(BlockReads.largest, out.numel())
        return out  # a copy: what is computed from it is not watched


def is_library(fn: object) -> bool:
    return getattr(fn, "__module__", "").startswith("paged_kv.")
