"""The one grading harness: the learner's object and the library's reference driven through
the same calls, compared after each, the first difference shrunk to a replayable repro and
reported as one cause (`causes`).

How a chapter declares a check:

    @exercise(1, "allocate")
    def check_allocate(pool_cls: type, *, seed: int = 0) -> None:
        fixed(scenario)                       # the few scenarios the exercise text names
        search(play, draw, trials=60, seed=seed, what="check_allocate")
        passed("...")

- `draw(rng) -> ops`: a trial's operations, as intents that stay legal when others are
  removed (resolve them against the state when applied), so that any subsequence replays.
- `play(ops, trial)` (and `scenario(trial)`) build the learner's object and the reference and
  apply each operation through the `Trial`:
  - `trial.same(line, mine, theirs)`: the learner's `mine()` and the library's `theirs()` must
    end alike: both refuse with the same `PagedKVError` (and its fields), or both return
    equal results (or `compare(got, want)` returns the message of a difference);
  - `trial.expect(expr, got, want)` after a call: an observable read back (a state difference
    right after a refused call is `not_all_or_nothing`, else `wrong_state`);
  - `trial.hand(value)`: a copy of a list for the learner, watched after every later call
    (a change now or later, through a kept alias, is `mutates_argument`);
  - `trial.returns_a_copy(line, value, expr, read)`: a list the learner returned is the
    caller's (changing it must not change what `read()` gives: else `shares_result`);
  - `trial.run(line, fn, *args)`: a call of the learner's alone; `trial.fail(cause, ...)`.
- `cost.constant_work(...)` counts work at two sizes (`work_grows`), `stage(...)` names what
  is running for a too-slow answer (the `exercise` decorator caps each check at 10 s).

To add a cause, see `causes`. The wrong answers live as data in tests/wrong/chNN/.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from paged_kv.course.checks import causes
from paged_kv.course.checks.failures import (
    CheckFailed,
    ExerciseNotDone,
    learner_error,
    short_repr,
    where_raised,
)
from paged_kv.errors import PagedKVError


class Mismatch(Exception):
    """A trial went wrong: `cause` is the key (shrinking keeps it and `subject`), `message`
    says it to the learner."""

    def __init__(self, cause: str, message: str, subject: str = "") -> None:
        super().__init__(message)
        self.cause, self.message, self.subject = cause, message, subject


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _method(line: str) -> str:
    """`pool.release` for `pool.release([1])  # ...`, the subject of a line."""
    return line.split("(")[0].split("=")[-1].strip()


class Trial:
    """The calls of one run, as the lines of Python that replay them."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._watched: list[tuple[str, list[Any], list[Any]]] = []  # line, as given, handed
        self._refused = False
        self._pending: Mismatch | None = None

    def settle(self) -> None:
        """Raise a difference held back until the state after a refusal was compared."""
        if self._pending is not None:
            raise self._pending

    def note(self, line: str) -> None:
        self.lines.append(line)

    def hand(self, value: list[Any]) -> list[Any]:
        """A copy of `value` for the learner's next call, watched from then on."""
        handed = list(value)
        self._watched.append(("", list(value), handed))
        return handed

    def _check_watched(self, line: str) -> None:
        for i, (given_to, snapshot, handed) in enumerate(self._watched):
            given_to = given_to or line
            self._watched[i] = (given_to, snapshot, handed)
            if handed != snapshot:
                when = "after the call" if given_to == line else f"after the later `{line}`"
                self.fail(
                    causes.MUTATES_ARGUMENT,
                    subject=_method(given_to),
                    line=given_to,
                    want=snapshot,
                    got=handed,
                    when=when,
                )

    def _learner(self, line: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except (CheckFailed, ExerciseNotDone):
            raise
        except NotImplementedError as exc:
            raise learner_error(exc) from None
        except Exception as exc:
            message = causes.say(
                causes.RAISED, line=line, error=_said(exc), where=where_raised(exc)
            )
            raise Mismatch(causes.RAISED, message, _method(line)) from exc

    def run(self, line: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The learner's `fn(*args)`, recorded as `line`; what it returned is noted."""
        self.settle()
        self.lines.append(line)
        self._refused = False
        result = self._learner(line, lambda: fn(*args, **kwargs))
        self._check_watched(line)
        if isinstance(result, int | list | tuple | str | bytes) and not isinstance(result, bool):
            self.lines[-1] = f"{line}  # returned {short_repr(result, 80)}"
        return result

    def read(self, expr: str, fn: Callable[[], Any]) -> Any:
        """The learner's `fn()`, a read that changes nothing (not recorded)."""
        return self._learner(expr, fn)

    def same(
        self,
        line: str,
        mine: Callable[[], Any],
        theirs: Callable[[], Any],
        *,
        why: str = "",
        hint: str = "",
        compare: Callable[[Any, Any], str | None] | None = None,
    ) -> tuple[Any, Any]:
        """Run the library's `theirs()`, then the learner's `mine()`: the same refusal (type and
        fields; `why` says why it refuses), or results that `compare` (default: equality) finds
        alike (`hint` says what to do when they differ)."""
        try:
            want = theirs()
        except PagedKVError as refusal:
            return self.refuses(line, mine, refusal, why=why), refusal
        got = self.run(line, mine)
        if compare is None:
            if got != want:
                self.fail(causes.WRONG_RESULT, hint, line=line, want=want, got=short_repr(got))
        else:
            wrong = compare(got, want)
            if wrong:
                self.fail(causes.WRONG_RESULT, wrong, line=line, want=want, got=short_repr(got))
        return got, want

    def refuses(
        self,
        line: str,
        mine: Callable[[], Any],
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
        want = type(refusal).__name__
        try:
            got = mine()
        except also as exc:
            self.lines[-1] = f"{line}  # raises {type(exc).__name__}"
            self._refused = True
            return exc
        except type(refusal) as exc:
            self.lines[-1] = f"{line}  # raises {want}"
            self._refused = True
            self._check_watched(line)
            fields, theirs = vars(exc), vars(refusal)
            if any(fields.get(k) != v for k, v in theirs.items()):
                mine_said = ", ".join(f"{k}={fields.get(k)!r}" for k in theirs)
                wanted = ", ".join(f"{k}={v!r}" for k, v in theirs.items())
                # judged after the state read back: a refusal that took blocks says so first
                self._pending = Mismatch(
                    causes.WRONG_ERROR,
                    causes.say(
                        causes.WRONG_ERROR,
                        hint,
                        line=line,
                        want=f"{want}({wanted})",
                        why=why or "its fields say what was asked and what there is",
                        error=f"{want}({mine_said})",
                        where="",
                    ),
                    _method(line),
                )
            return exc
        except (CheckFailed, ExerciseNotDone):
            raise
        except NotImplementedError as exc:
            raise learner_error(exc) from None
        except Exception as exc:
            self.fail(
                causes.WRONG_ERROR,
                hint,
                line=line,
                want=want,
                why=why or refusal,
                error=_said(exc),
                where=where_raised(exc),
            )
        self.fail(
            causes.MISSING_REFUSAL,
            hint,
            line=line,
            want=want,
            why=why or refusal,
            got=short_repr(got),
        )

    def returns_a_copy(
        self, line: str, returned: list[Any], expr: str, read: Callable[[], Any]
    ) -> None:
        """`returned` (what `line` gave) is the caller's: changing it must not change `expr`."""
        before = self.read(expr, read)
        before = list(before) if isinstance(before, list) else before
        returned.append(-1)
        after = self.read(expr, read)
        after = list(after) if isinstance(after, list) else after
        returned.pop()
        if after != before:
            self.note(f"{line.split('  #')[0]}.append(-1)  # the caller changes its list")
            self.fail(
                causes.SHARES_RESULT, line=line.split("  #")[0], expr=expr, want=before, got=after
            )

    def expect(self, expr: str, got: Any, want: Any, hint: str = "") -> None:
        """An observable read back after the last line: `got` must equal `want`."""
        if got == want:
            return
        line = _method(self.lines[-1]) if self.lines else expr
        if isinstance(want, list) and _sorted(got) == want:
            self.fail(causes.WRONG_ORDER, hint, subject=expr, line=expr, want=want, got=got)
        cause = causes.NOT_ALL_OR_NOTHING if self._refused else causes.WRONG_STATE
        last = self.lines[-1].split("  #")[0] if self.lines else line
        self.fail(cause, hint, subject=expr, line=last, expr=expr, want=want, got=short_repr(got))

    def fail(self, cause: str, hint: str = "", *, subject: str = "", **fields: Any) -> NoReturn:
        line = str(fields.get("line", ""))
        raise Mismatch(cause, causes.say(cause, hint, **fields), subject or _method(line))

    def render(self, indent: str = "    ") -> str:
        return "\n".join(indent + line for line in self.lines)


def fail_with(cause: str, subject: str, message: str) -> NoReturn:
    """Fail a trial with `cause` and a message of its own, for evidence no template says."""
    raise Mismatch(cause, f"{message}.", subject)


def _sorted(value: Any) -> Any:
    try:
        return sorted(value)
    except TypeError:
        return value


def fixed(scenario: Callable[[Trial], None]) -> None:
    """Run a scripted scenario; a failure lists every step so far."""
    trial = Trial()
    try:
        with quiet():
            scenario(trial)
            trial.settle()
    except Mismatch as failure:
        raise CheckFailed(
            f"{failure.message}\nEvery step of the check:\n{trial.render()}", failure.cause
        ) from None


def search(
    play: Callable[[list[Any], Trial], None],
    draw: Callable[[random.Random], list[Any]],
    *,
    trials: int,
    seed: int,
    what: str,
    keep: int = 1,
    max_runs: int = 300,
) -> None:
    """Random trials of `play(ops, trial)`; the first failure is shrunk, then reported. The
    first `keep` operations set the trial up and are never removed."""
    for number in range(trials):
        ops = draw(random.Random(seed * 100_003 + number))
        with quiet():
            found = _attempt(play, ops)
            if found is None:
                continue
            failure, trial = _shrink(play, ops, found, keep, max_runs)
        raise CheckFailed(
            f"{failure.message}\nReplay it (random trial {number} of {what}, seed={seed}, "
            f"shrunk to the {len(trial.lines)} lines that still fail):\n{trial.render()}",
            failure.cause,
        )


def _attempt(
    play: Callable[[list[Any], Trial], None], ops: list[Any]
) -> tuple[Mismatch, Trial] | None:
    trial = Trial()
    try:
        play(ops, trial)
        trial.settle()
    except Mismatch as failure:
        return failure, trial
    return None


def _shrink(
    play: Callable[[list[Any], Trial], None],
    ops: list[Any],
    found: tuple[Mismatch, Trial],
    keep: int,
    max_runs: int,
) -> tuple[Mismatch, Trial]:
    """Remove chunks of operations while the trial still fails with the same cause on the
    same subject."""
    key = (found[0].cause, found[0].subject)
    best, runs, chunk = found, 0, max(1, (len(ops) - keep) // 2)
    while chunk >= 1 and runs < max_runs and len(ops) > keep:
        i, removed = keep, False
        while i < len(ops) and runs < max_runs:
            candidate = ops[:i] + ops[i + chunk :]
            runs += 1
            result = _attempt(play, candidate)
            if result is not None and (result[0].cause, result[0].subject) == key:
                ops, best, removed = candidate, result, True
            else:
                i += chunk
        if not removed:
            chunk //= 2
    return best


@contextmanager
def quiet() -> Iterator[None]:
    """Silence the learner's prints while a check replays many trials."""
    stdout = sys.stdout
    try:
        with open(os.devnull, "w") as devnull:
            sys.stdout = devnull
            yield
    finally:
        sys.stdout = stdout
