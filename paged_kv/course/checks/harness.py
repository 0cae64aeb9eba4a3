"""The one grading harness: the learner's object and the library's reference driven through
the same calls, compared after each, the first difference shrunk to a replayable repro and
reported as one cause (`causes`). A check runs `fixed(scenario)` for the scenarios its text
names, then `search(play, draw, ...)`: `draw(rng)` gives a trial's operations as intents that
stay legal when others are removed, so that any subsequence replays; `play(ops, trial)` builds
both objects and applies each operation through the `Trial`. Most checks declare the two as
`differential(start, step)` and `intents(setup, intent, steps)`.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NoReturn

from paged_kv.course.checks import causes
from paged_kv.course.checks.failures import (
    CheckFailed,
    ExerciseNotDone,
    learner_error,
    plain,
    short_repr,
    where_raised,
)
from paged_kv.errors import PagedKVError

Thunk = Callable[[], Any]
Play = Callable[[list[Any], "Trial"], None]
Draw = Callable[[random.Random], list[Any]]
Read = tuple[str, Thunk, Any, str]  # an expression, the learner's read of it, its value, a hint


def name_of(cls: Any, default: str) -> str:
    """The name a repro gives the learner's class (or the function a `partial` wraps)."""
    return getattr(getattr(cls, "func", cls), "__name__", default)


class Mismatch(Exception):
    """A trial went wrong: `cause` is the key (shrinking keeps it and `subject`), `message`
    says it to the learner."""

    def __init__(self, cause: str, message: str, subject: str = "") -> None:
        super().__init__(message)
        self.cause, self.message, self.subject = cause, message, subject


def fail_with(cause: str, subject: str, message: str) -> NoReturn:
    """Fail a trial with `cause` and a message of its own, for evidence no template says."""
    raise Mismatch(cause, f"{message}.", subject)


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _method(line: str) -> str:
    """`pool.release` for `pool.release([1])  # ...`, the subject of a line."""
    return line.split("(")[0].split("=")[-1].strip()


def _pass_on(exc: Exception) -> None:
    """Raise again what is no answer of the learner's: a check's verdict, or a stub."""
    if isinstance(exc, CheckFailed | ExerciseNotDone):
        raise exc
    if isinstance(exc, NotImplementedError):
        raise learner_error(exc) from None


class Trial:
    """The calls of one run, as the lines of Python that replay them."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._watched: list[list[Any]] = []  # [the line it was given to, as given, as handed]
        self._refused = False
        self._pending: Mismatch | None = None  # a wrong refusal, told after the state

    def settle(self) -> None:
        """Raise a difference held back until the state after a refusal was compared."""
        if self._pending is not None:
            raise self._pending

    def note(self, line: str) -> None:
        self.lines.append(line)

    def hand(self, value: list[Any]) -> list[Any]:
        """A copy of `value` for the learner's next call, watched after every later one (a
        change, now or later through a kept alias, is `mutates_argument`)."""
        self._watched.append(["", list(value), handed := list(value)])
        return handed

    def _check_watched(self, line: str) -> None:
        for watched in self._watched:
            watched[0] = given_to = watched[0] or line
            _, given, handed = watched
            if given != plain(handed):
                when = "after the call" if given_to == line else f"after the later `{line}`"
                self.fail(causes.MUTATES_ARGUMENT, line=given_to, want=given, got=handed, when=when)

    def read(self, expr: str, fn: Thunk) -> Any:
        """The learner's `fn()`, a read that changes nothing (not recorded)."""
        try:
            return fn()
        except Exception as exc:
            _pass_on(exc)
            said = causes.say(causes.RAISED, line=expr, error=_said(exc), where=where_raised(exc))
            raise Mismatch(causes.RAISED, said, _method(expr)) from exc

    def run(self, line: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The learner's `fn(*args)`, recorded as `line`; what it returned is noted."""
        self.settle()
        self.lines.append(line)
        self._refused = False
        result = self.read(line, lambda: fn(*args, **kwargs))
        self._check_watched(line)
        if isinstance(result, int | list | tuple | str | bytes) and not isinstance(result, bool):
            self.lines[-1] = f"{line}  # returned {short_repr(result, 80)}"
        return result

    def same(
        self,
        line: str,
        mine: Thunk,
        theirs: Thunk,
        *,
        why: str = "",
        hint: str = "",
        compare: Callable[[Any, Any], str | None] | None = None,
    ) -> tuple[Any, Any]:
        """The library's `theirs()`, then the learner's `mine()`: the same refusal (type and
        fields; `why` says why it refuses), or results that `compare` (default: equality) finds
        alike (else its message, or `hint`, says what to do). Both compare `plain(got)`, never
        the learner's object."""
        try:
            want = theirs()
        except PagedKVError as refusal:
            return self.refuses(line, mine, refusal, why=why), refusal
        got = self.run(line, mine)
        wrong = compare(plain(got), want) if compare else None
        if wrong or (compare is None and want != plain(got)):
            self.fail(causes.WRONG_RESULT, wrong or hint, line=line, want=want, got=short_repr(got))
        return got, want

    def call(self, obj: str, mine: Any, ref: Any, method: str, *args: Any, **options: Any) -> Any:
        """`obj.method(*args)` on the learner's `mine` (its lists handed, watched) and on `ref`
        (or `options["theirs"]()`, where the library's call differs), through `same`."""
        handed = [self.hand(a) if isinstance(a, list) else a for a in args]
        line = f"{obj}.{method}({', '.join(map(repr, args))})"
        theirs = options.pop("theirs", None) or (lambda: getattr(ref, method)(*args))
        return self.same(line, lambda: getattr(mine, method)(*handed), theirs, **options)

    def refuses(
        self,
        line: str,
        mine: Thunk,
        refusal: BaseException,
        *,
        why: str = "",
        hint: str = "",
        also: tuple[type[Exception], ...] = (),
    ) -> BaseException:
        """The learner's `mine()` must raise `refusal`'s type with its fields (or one of the
        types in `also`)."""
        self.settle()
        self.lines.append(line)
        fields = {"line": line, "want": type(refusal).__name__, "why": why or refusal}
        try:
            got = mine()
        except (*also, type(refusal)) as exc:
            self.lines[-1] = f"{line}  # raises {type(exc).__name__}"
            self._refused = True
            if not isinstance(exc, also):
                self._check_watched(line)
                self._pending = _wrong_fields(line, exc, refusal, why, hint)
            return exc
        except Exception as exc:
            _pass_on(exc)
            self.fail(causes.WRONG_ERROR, hint, error=_said(exc), where=where_raised(exc), **fields)
        self.fail(causes.MISSING_REFUSAL, hint, got=short_repr(got), **fields)

    def returns_a_copy(self, line: str, returned: list[Any], expr: str, read: Thunk) -> None:
        """`returned` (what `line` gave) is the caller's: changing it must not change `expr`."""
        line = line.split("  #")[0]
        before = plain(self.read(expr, read))
        returned.append(-1)
        after = plain(self.read(expr, read))
        returned.pop()
        if before != after:
            self.note(f"{line}.append(-1)  # the caller changes its list")
            self.fail(causes.SHARES_RESULT, line=line, expr=expr, want=before, got=after)

    def expect(self, expr: str, got: Any, want: Any, hint: str = "") -> None:
        """An observable read back after the last line: `got` must equal `want` (right after a
        refused call, a difference is `not_all_or_nothing`). It compares `plain(got)`."""
        if want == plain(got):
            return
        with contextlib.suppress(TypeError):  # (items that do not sort are in no order)
            if isinstance(want, list) and want == sorted(plain(got)):
                self.fail(causes.WRONG_ORDER, hint, subject=expr, line=expr, want=want, got=got)
        cause = causes.NOT_ALL_OR_NOTHING if self._refused else causes.WRONG_STATE
        last = self.lines[-1].split("  #")[0] if self.lines else expr
        self.fail(cause, hint, subject=expr, line=last, expr=expr, want=want, got=short_repr(got))

    def fail(self, cause: str, hint: str = "", *, subject: str = "", **fields: Any) -> NoReturn:
        line = str(fields.get("line", ""))
        raise Mismatch(cause, causes.say(cause, hint, **fields), subject or _method(line))

    def render(self, indent: str = "    ") -> str:
        return "\n".join(indent + line for line in self.lines)


def _wrong_fields(
    line: str, mine: BaseException, refusal: BaseException, why: str, hint: str
) -> Mismatch | None:
    """A refusal of the right type whose fields (what was asked, what there is) differ."""
    fields, theirs = vars(mine), vars(refusal)
    if all(v == plain(fields.get(k)) for k, v in theirs.items()):
        return None
    name = type(refusal).__name__
    said = {
        "want": f"{name}({', '.join(f'{k}={v!r}' for k, v in theirs.items())})",
        "error": f"{name}({', '.join(f'{k}={fields.get(k)!r}' for k in theirs)})",
        "why": why or "its fields say what was asked and what there is",
    }
    message = causes.say(causes.WRONG_ERROR, hint, line=line, where="", **said)
    return Mismatch(causes.WRONG_ERROR, message, _method(line))


def fixed(scenario: Callable[[Trial], None]) -> None:
    """Run a scripted scenario; a failure lists every step so far."""
    found = _attempt(lambda _, trial: scenario(trial), [])
    if found:
        failure, trial = found
        raise CheckFailed(
            f"{failure.message}\nEvery step of the check:\n{trial.render()}", failure.cause
        )


def search(
    play: Play, draw: Draw, *, trials: int, seed: int, what: str, keep: int = 1, max_runs: int = 300
) -> None:
    """Random trials of `play(ops, trial)`; the first failure is shrunk (in at most `max_runs`
    replays: fewer where one replay is slow, as an engine workload), then reported. The first
    `keep` operations set the trial up and are never removed."""
    for number in range(trials):
        ops = draw(random.Random(seed * 100_003 + number))
        found = _attempt(play, ops)
        if found:
            failure, trial = _shrink(play, ops, found, keep, max_runs)
            raise CheckFailed(
                f"{failure.message}\nReplay it (random trial {number} of {what}, seed={seed}, "
                f"shrunk to the {len(trial.lines)} lines that still fail):\n{trial.render()}",
                failure.cause,
            )


def differential(
    start: Callable[[Any, Trial], Any], step: Callable[[Trial, Any, Any], Iterable[Read] | None]
) -> Play:
    """The play of a differential trial: `start(ops[0], trial)` builds the learner's object and
    the library's (None: nothing to check), `step(trial, state, op)` applies an intent to both
    and gives the reads that must then agree (None: it did not apply)."""

    def play(ops: list[Any], trial: Trial) -> None:
        state = start(ops[0], trial)
        for op in ops[1:] if state is not None else ():
            for expr, read, want, hint in step(trial, state, op) or ():
                trial.expect(expr, trial.read(expr, read), want, hint)

    return play


def intents(
    setup: Callable[[random.Random], Any], intent: Callable[[random.Random, Any], Any], steps: int
) -> Draw:
    """The draw of a differential trial: `setup(rng)` (sizes), then `steps` intents."""

    def draw(rng: random.Random) -> list[Any]:
        first = setup(rng)
        return [first, *(intent(rng, first) for _ in range(steps))]

    return draw


def _attempt(play: Play, ops: list[Any]) -> tuple[Mismatch, Trial] | None:
    """Play `ops` on a fresh trial, the learner's prints silenced: the failure, if any."""
    trial = Trial()
    try:
        with quiet():
            play(ops, trial)
            trial.settle()
    except Mismatch as failure:
        return failure, trial
    return None


def _shrink(
    play: Play, ops: list[Any], found: tuple[Mismatch, Trial], keep: int, max_runs: int
) -> tuple[Mismatch, Trial]:
    """Remove chunks of operations while the trial still fails with the same cause on the
    same subject."""
    key = (found[0].cause, found[0].subject)
    best, runs, chunk = found, 0, max(1, (len(ops) - keep) // 2)
    while chunk >= 1 and runs < max_runs and len(ops) > keep:
        i, removed = keep, False
        while i < len(ops) and runs < max_runs:
            candidate, runs = ops[:i] + ops[i + chunk :], runs + 1
            result = _attempt(play, candidate)
            if result is not None and (result[0].cause, result[0].subject) == key:
                ops, best, removed = candidate, result, True
            else:
                i += chunk
        chunk = chunk if removed else chunk // 2
    return best


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence the learner's prints while a check replays many trials."""
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        yield
