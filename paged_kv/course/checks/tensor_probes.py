"""Tensor probes: the learner's function and the library's reference on the same inputs, one
cause named from what the output shows.

A `Case` is the Python that builds the inputs (the replay), optionally with a *twin*: the
same case without its difficulty (moderate scores, float32). The cause, in order: the output's
type, shape, dtype; the twin's cause when the case fails and its twin passes (`overflow`,
`precision`); NaN or inf where the reference is finite (`not_finite`); an output equal to a
named mistake's (`variants`); else `wrong_result`. Probes of how the answer works:
`tiles_held` (tensor bytes alive while tiles stream), `BlockReads` (the largest read of a
cache at once), `library_calls` (a call into the library's attention code).
"""

from __future__ import annotations

import gc
import math
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch

import paged_kv.attention
from paged_kv.course.checks import causes
from paged_kv.course.checks.failures import CheckFailed, call, short_repr, stage

# float32 sums of a few dozen terms stay well inside these; float16 accumulation does not
TOLERANCE = {torch.float64: 1e-7, torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}
Reference = Callable[[dict[str, Any]], Any]
Difference = tuple[str, str, str]  # (cause, what the learner's output shows, the reference's)


@dataclass(frozen=True)
class Case:
    """`code` builds the inputs (the names `call` uses); `twin` is the same case without the
    difficulty, and `twin_cause` the cause when the case fails and its twin passes."""

    what: str
    code: str
    hint: str = ""  # what to do when this case fails with `wrong_result` or `not_finite`
    twin: str | None = None
    twin_cause: str = causes.WRONG_RESULT
    twin_hint: str = ""


def build(code: str) -> dict[str, Any]:
    names: dict[str, Any] = {"torch": torch, "math": math}
    exec(code, names)  # the check's own case code, shown to the learner as the replay
    return names


def replay(code: str, line: str) -> str:
    return "\n".join("    " + text for text in [*code.strip().splitlines(), line])


def difference(got: Any, want: Any) -> Difference | None:
    """(cause, what the learner's output shows, what the reference's does), or None when they
    agree. Tuples are compared item by item (the first item that differs speaks)."""
    if isinstance(want, tuple):
        if not isinstance(got, tuple | list) or len(got) != len(want):
            return causes.WRONG_RESULT, short_repr(got), f"a tuple of {len(want)} tensors"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            found = difference(g, w)
            if found:
                return found[0], f"item {i} {found[1]}", f"item {i} {found[2]}"
        return None
    if not isinstance(got, torch.Tensor):
        return causes.WRONG_RESULT, short_repr(got), "a tensor"
    if got.shape != want.shape:
        return causes.WRONG_SHAPE, f"shape {tuple(got.shape)}", f"shape {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return causes.WRONG_DTYPE, str(got.dtype), str(want.dtype)
    mine, theirs = got.detach().double(), want.detach().double()
    finite = torch.isfinite(theirs)
    if not torch.isfinite(mine[finite]).all():
        return causes.NOT_FINITE, _shown(mine), _shown(theirs)
    tol = TOLERANCE[want.dtype]
    if torch.allclose(mine, theirs, rtol=tol, atol=tol):
        return None
    err = (mine - theirs)[finite].abs().max().item() if finite.any() else math.inf
    return (
        causes.WRONG_RESULT,
        f"{_shown(mine)} (off by {err:.2g}, allowed {tol:g})",
        _shown(theirs),
    )


def _shown(t: torch.Tensor) -> str:
    values = t.flatten()[:8].tolist()
    rounded = [round(v, 5) if math.isfinite(v) else v for v in values]
    more = f" … ({t.numel()} values)" if t.numel() > 8 else ""
    return f"{rounded if t.dim() else rounded[0]}{more}"


Arguments = Callable[[dict[str, Any]], tuple[Any, ...]]
Runner = Callable[[Callable[..., Any], dict[str, Any]], Any]


def judge(fn: Callable[..., Any], case: Case, line: str, arguments: Arguments,
          reference: Reference, *, variants: Iterable[tuple[str, Reference]] = (),
          run: Runner | None = None) -> None:  # fmt: skip
    """Call `fn(*arguments(inputs))` on `case` (shown as `line`) and compare with
    `reference(inputs)`; raise CheckFailed with one cause if they differ. `variants`: cause ->
    what that mistake outputs on the inputs. `run(fn, inputs)` replaces the plain call (for a
    check that watches how `fn` works)."""
    found = _outcome(fn, case.what, case.code, line, arguments, reference, run)
    if found is None:
        return
    cause, got, want = found
    hint = case.hint
    if cause in (causes.WRONG_RESULT, causes.NOT_FINITE):
        twin = case.twin and _outcome(fn, case.what, case.twin, line, arguments, reference)
        if case.twin and twin is None:
            cause, hint = case.twin_cause, case.twin_hint
        else:
            output = fn(*arguments(build(case.code)))
            first = output[0] if isinstance(output, tuple | list) and output else output
            for mistake, output in variants:
                if difference(first, output(build(case.code))) is None:
                    cause, hint = mistake, ""
                    break
    fail(cause, case, line, hint, got=got, want=want)


def fail(cause: str, case: Case, line: str, hint: str, **fields: object) -> None:
    message = causes.say(cause, hint, line=line, **fields)
    raise CheckFailed(f"On {case.what}: {message}\nReplay it:\n{replay(case.code, line)}", cause)


def _outcome(fn: Callable[..., Any], what: str, code: str, line: str, arguments: Arguments,
             reference: Reference, run: Runner | None = None) -> Difference | None:  # fmt: skip
    inputs, doing = build(code), f"{line} on {what}"
    with stage(doing):
        got = call(doing, run, fn, inputs) if run else call(doing, fn, *arguments(inputs))
    return difference(got, reference(build(code)))


# -- probes of how the answer works --------------------------------------------------------------


def _live_tensor_bytes() -> int:
    """Bytes of the distinct storages of every tensor alive in the process."""
    storages: dict[int, int] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fake tensor (torch.compile's) warns or raises here
        for obj in gc.get_objects():
            if issubclass(type(obj), torch.Tensor) and obj.layout is torch.strided:
                try:  # (sparse tensors have no storage, fake ones no data: none is a tile)
                    storage = obj.untyped_storage()
                    storages[storage.data_ptr()] = storage.nbytes()
                except (RuntimeError, NotImplementedError, UserWarning):
                    continue
    return sum(storages.values())


def tiles_held(tiles: Iterable[Any], early: int, late: int, into: list[int]) -> Iterator[Any]:
    """`tiles`, one at a time; appends to `into` the tensor bytes alive when tile `early` and
    tile `late` are handed out (an online pass holds the same; a kept copy grows)."""
    for i, tile in enumerate(tiles):
        if i in (early, late):
            into.append(_live_tensor_bytes())
        yield tile
        del tile


class BlockReads(torch.Tensor):
    """A cache that records the size of every tensor copied out of it (indexing with a list,
    `.float()` of a half cache, `index_select`...): reading one block at a time keeps each
    copy within a block. Views of it (a block, a slice, a reshape) stay watched."""

    largest = 0

    @classmethod
    def __torch_function__(cls, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:  # fmt: skip
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
            if not isinstance(out, torch.Tensor):
                return out
            watched = {a.untyped_storage().data_ptr() for a in args if isinstance(a, cls)}
            if out.untyped_storage().data_ptr() in watched:
                return out.as_subclass(cls)  # a view: still the cache
        BlockReads.largest = max(BlockReads.largest, out.numel())
        return out  # a copy: what is computed from it is not watched


_ATTENTION = os.path.dirname(paged_kv.attention.__file__) + os.sep


def is_library(fn: object) -> bool:
    return getattr(fn, "__module__", "").startswith("paged_kv.")


@contextmanager
def library_calls(into: list[str]) -> Iterator[None]:
    """Record in `into` the library's attention functions called while the block runs."""

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(_ATTENTION) and not into:
            into.append(f"{frame.f_globals.get('__name__')}.{frame.f_code.co_name}")

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield
    finally:
        sys.setprofile(previous)
