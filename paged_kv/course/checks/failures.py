"""What every check says when the learner's code is wrong, raises, is too slow or is not
written yet: `CheckFailed` (naming one cause of `causes`) or `ExerciseNotDone`, which Jupyter
prints as their message alone, never a traceback into the checks (some are answers) or the
library; the cell still errors, so nbval and the grader see it."""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import functools
import inspect
import os
import signal
import sys
import sysconfig
import threading
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import paged_kv
from paged_kv.course import check_marker
from paged_kv.course.checks import causes
from paged_kv.errors import PagedKVError

F = TypeVar("F", bound=Callable[..., Any])

_LIBRARY_DIRS = tuple(
    os.path.realpath(p) + os.sep
    for p in {str(Path(paged_kv.__file__).parent)}
    | {sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")}
)
_CHECKS_DIR = os.path.realpath(Path(__file__).parent) + os.sep
_label: contextvars.ContextVar[str | None] = contextvars.ContextVar("exercise", default=None)
_stage: contextvars.ContextVar[str] = contextvars.ContextVar("stage", default="running the check")
CAP_SECONDS = 10.0  # the most one check may take, on any answer
STUB = ": replace this line with your code"


class _ShownAsMessage:
    def _render_traceback_(self) -> list[str]:  # IPython prints this instead of a traceback
        first, *rest = str(self).splitlines() or [""]
        return [f"\x1b[1;31m{type(self).__name__}\x1b[0m: {first}", *rest]


class CheckFailed(_ShownAsMessage, AssertionError):
    """The learner's code did something the chapter's rules forbid; the message says what,
    `cause` (a key of `causes.TEMPLATES`) names why."""

    def __init__(self, message: str, cause: str = causes.UNNAMED) -> None:
        super().__init__(message)
        self.cause = cause


class ExerciseNotDone(_ShownAsMessage, NotImplementedError):
    """An exercise still has its `raise NotImplementedError(...)` stub."""


def expect(condition: bool, message: str, cause: str = causes.UNNAMED) -> None:
    if not condition:
        raise CheckFailed(message, cause)


def passed(what: str) -> None:
    """Say that the check calling this passed, and leave its mark for the grader (only a check
    of this package leaves one: a learner's `def check_x(): passed(...)` does not)."""
    label = _label.get()
    print(f"✅ {label}: {what}" if label else f"✅ {what}: all checks passed")
    caller = sys._getframe(1).f_code
    if os.path.realpath(caller.co_filename).startswith(_CHECKS_DIR):
        check_marker.leave(caller.co_name, label or "", what)


def short_repr(value: Any, limit: int = 200) -> str:
    text = repr(_readable(value))
    return text if len(text) <= limit else text[: limit - 20] + f"… ({len(text)} characters)"


def _readable(value: Any) -> Any:
    """`value` with its memoryviews as bytes (a view's repr is only its address)."""
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, list):
        return [_readable(item) for item in value]
    if isinstance(value, tuple):
        items = [_readable(item) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)  # a NamedTuple
    return value


_SCALARS = (bool, int, float, complex, str, bytes, type(None))
_TRUSTED = ("paged_kv", "torch", "numpy")  # modules whose types compare by their own code


class _Unknown:
    """A value of a type the checks do not know (the learner's own): equal only to itself."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"<a {type(self.value).__name__}>"


def plain(value: Any) -> Any:
    """`value` rebuilt from builtin types before a check compares it, so that no comparison runs
    the learner's code: a subclass of list, int, str... is its base's value (read through the
    base's own methods, never the subclass's `__iter__`, `__int__` or `__eq__`), a memoryview
    its bytes. The library's own objects (and torch's, numpy's) are kept, their dataclass
    fields made plain; an object of any other type becomes one that equals nothing else.
    Compare as `want == plain(got)`, the library's value on the left."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    for base, read in _BASES:
        if isinstance(value, base):
            return read(value)
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, tuple):
        items = [plain(item) for item in tuple.__iter__(value)]
        named = hasattr(kind, "_fields") and _trusted(kind)
        return kind(*items) if named else tuple(items)  # the library's NamedTuple kept
    if isinstance(value, list):
        return [plain(item) for item in list.__iter__(value)]
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in dict.items(value)}
    if isinstance(value, frozenset):
        return frozenset(plain(item) for item in frozenset.__iter__(value))
    if isinstance(value, set):
        return {plain(item) for item in set.__iter__(value)}
    if not _trusted(kind):
        return _Unknown(value)
    if dataclasses.is_dataclass(value):
        copied = copy.copy(value)
        for field in dataclasses.fields(value):
            object.__setattr__(copied, field.name, plain(getattr(value, field.name)))
        return copied
    return value


_BASES: tuple[tuple[type, Callable[[Any], Any]], ...] = (
    (int, int.__int__),
    (float, float.__float__),
    (str, str.__str__),
    (bytes, lambda v: bytes.__getitem__(v, slice(None))),
    (bytearray, lambda v: bytes(bytearray.__iter__(v))),
)


def _trusted(kind: type) -> bool:
    return kind.__module__.split(".")[0] in _TRUSTED


@contextlib.contextmanager
def stage(doing: str, var: contextvars.ContextVar[Any] = _stage) -> Iterator[None]:
    """Name what the check is doing (with the size), for a too-slow answer's message (or set
    another of this module's context variables while the block runs)."""
    token = var.set(doing)
    try:
        yield
    finally:
        var.reset(token)


def exercise(number: int | None, title: str) -> Callable[[F], F]:
    """Label a check "Exercise N (title)" (or just "Title" without a number), cap its time and
    turn the learner's exceptions into messages. A check run inside another is left to it."""
    label = f"Exercise {number} ({title})" if number else title[0].upper() + title[1:]

    def wrap(check: F) -> F:
        @functools.wraps(check)
        def run(*args: Any, **kwargs: Any) -> Any:
            if _label.get():
                return check(*args, **kwargs)
            try:
                with stage(label, _label), _capped():
                    return check(*args, **kwargs)
            except (CheckFailed, ExerciseNotDone) as exc:
                if not str(exc).startswith(label):
                    exc.args = (f"{label}: {exc}",)
                raise
            except _OutOfTime as late:
                message = causes.say(causes.TOO_SLOW, seconds=CAP_SECONDS, stage=late.args[0])
                raise CheckFailed(f"{label}: {message}", causes.TOO_SLOW) from None
            except Exception as exc:
                mine = isinstance(exc, NotImplementedError | PagedKVError) or _learner_frame(exc)
                if not mine:  # neither the learner's code nor the library refusing what it did
                    raise  # a bug in the checks themselves: show its traceback
                raise learner_error(exc, label) from None

        return cast(F, run)

    return wrap


class _OutOfTime(BaseException):
    """Past `CAP_SECONDS` (a BaseException: the learner's `except Exception` lets it by)."""


@contextlib.contextmanager
def _capped() -> Iterator[None]:
    """Raise `_OutOfTime` in the running code after `CAP_SECONDS` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def ring(*_: Any) -> None:
        raise _OutOfTime(_stage.get())

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, CAP_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def stubs_as_not_done(check: F) -> F:
    """`check`, reporting a stub as "not done yet" in one line (as `exercise` checks do)."""
    if getattr(check, "__wrapped__", None) is not None:
        return check

    @functools.wraps(check)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return check(*args, **kwargs)
        except ExerciseNotDone:
            raise
        except NotImplementedError as exc:
            raise learner_error(exc, "This exercise") from None

    return cast(F, run)


def learner_error(exc: BaseException, label: str | None = None, doing: str = "") -> Exception:
    """`exc`, raised while a check ran the learner's code, as a message about their code."""
    label, frame = label or _label.get() or "this check", _learner_frame(exc)
    if isinstance(exc, NotImplementedError):  # which stub, and what to do about it
        where = f"`{frame.name}`" if frame else "a function"
        where = f"{where} raises NotImplementedError ({exc})"
        if str(exc).endswith(STUB):
            where = f"`{str(exc)[: -len(STUB)]}` still has its stub"
        return ExerciseNotDone(
            f"{label} is not done yet: {where}. Write it, run its cell, then run this check again."
        )
    step = f"\nThe check was running: {doing}" if doing else ""
    if frame is None:  # the library refused a state the learner's code made
        text = str(exc).rstrip()
        text += "" if text.endswith((".", "!", "?")) else "."
        said = causes.say(causes.LIBRARY_REFUSED, error=f"{type(exc).__name__}: {text}")
        return CheckFailed(f"{label}: {said}{step}", causes.LIBRARY_REFUSED)
    return CheckFailed(
        f"{label}: your code raised {type(exc).__name__}: {exc}{where_raised(exc)}.{step}",
        causes.RAISED,
    )


def _is_library(filename: str) -> bool:
    if filename.startswith("<"):
        return filename.startswith("<frozen")  # <stdin>, <ipython-input-...>: the learner's
    return os.path.realpath(filename).startswith(_LIBRARY_DIRS)


def _learner_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of `exc`'s traceback that runs the learner's code."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not _is_library(f.filename)]
    return frames[-1] if frames else None


def where_raised(exc: BaseException) -> str:
    """Where the learner's code raised `exc`, or called the library that raised it."""
    frame = _learner_frame(exc)
    if frame is None:
        return ""
    cell = "ipykernel_" in frame.filename or frame.filename.startswith("<ipython-input")
    place = f"line {frame.lineno} of {'its cell' if cell else Path(frame.filename).name}"
    line = f": `{frame.line.strip()}`" if frame.line else ""
    inner = traceback.extract_tb(exc.__traceback__)[-1]
    inside = (
        f" (raised inside {Path(inner.filename).name}'s `{inner.name}`, called from there)"
        if _is_library(inner.filename)
        else ""
    )
    return f"\n  in `{frame.name}`, {place}{line}{inside}"


def call(doing: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run the learner's `fn`; an exception becomes a message that names `doing` (a call that
    does not bind to `fn`'s signature is `bad_signature`)."""
    try:
        return fn(*args, **kwargs)
    except (CheckFailed, ExerciseNotDone):
        raise
    except Exception as exc:
        if isinstance(exc, TypeError) and _learner_frame(exc) is None:
            with contextlib.suppress(TypeError, ValueError):  # (no signature: not this)
                signature = inspect.signature(fn)
                try:
                    signature.bind(*args, **kwargs)
                except TypeError:
                    name = getattr(fn, "__name__", "function")
                    why = f"your {name}{signature} cannot take these arguments ({exc})"
                    said = causes.say(causes.BAD_SIGNATURE, doing=doing, why=why)
                    label = _label.get() or "this check"
                    raise CheckFailed(
                        f"{label}: {said}\nThe check was running: {doing}", causes.BAD_SIGNATURE
                    ) from None
        raise learner_error(exc, doing=doing) from None
