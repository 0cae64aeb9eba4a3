"""Repros that replay: the operations a check applied, as Python a learner can paste into a cell.

`Replay` records them; `fixed` runs a scripted scenario and lists every step of a failure;
`search` runs random trials and shrinks a failing one to the fewest operations that still
fail the same way, so every repro is complete and short.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from paged_kv.course.checks.failures import (
    CheckFailed,
    ExerciseNotDone,
    learner_error,
    short_repr,
    where_raised,
)


def _said(exc: BaseException) -> str:
    """`KeyError: 3`, or just `StopIteration` when the exception has no text."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class Failure(Exception):
    """A trial failed: `cause` says why (shrinking keeps it), `message` says it to the learner."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause
        self.message = message


class Replay:
    """The operations a check applied, as lines of Python that replay them.

    `run(line, fn, *args)` records `line`, calls the learner's `fn`, notes what it returned,
    and turns an exception into a `Failure` whose message names the step.
    """

    def __init__(self, *setup: str) -> None:
        self.lines: list[str] = list(setup)

    def note(self, line: str) -> None:
        self.lines.append(line)

    def run(self, line: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.lines.append(line)
        try:
            result = fn(*args, **kwargs)
        except (CheckFailed, ExerciseNotDone):
            raise
        except NotImplementedError as exc:
            raise learner_error(exc) from None
        except Exception as exc:
            raise Failure(
                f"raised {type(exc).__name__} at {where_raised(exc)}",
                f"`{line}` raised {_said(exc)}{where_raised(exc)}",
            ) from exc
        if isinstance(result, int | list | tuple | str | bytes) and not isinstance(result, bool):
            self.lines[-1] = f"{line}  # returned {short_repr(result, 80)}"
        return result

    def raises(
        self, error: type[Exception], line: str, fn: Callable[..., Any], *args: Any, why: str = ""
    ) -> Exception:
        """Record `line`, which must raise `error` (because `why`); a Failure otherwise."""
        because = f" ({why})" if why else ""
        self.lines.append(line)
        try:
            result = fn(*args)
        except error as exc:
            self.lines[-1] = f"{line}  # raises {error.__name__}"
            return exc
        except NotImplementedError as exc:
            raise learner_error(exc) from None
        except Exception as exc:
            raise Failure(
                f"{line}: raised {type(exc).__name__}, not {error.__name__}",
                f"`{line}` should raise {error.__name__}{because}, but it raised "
                f"{_said(exc)}{where_raised(exc)}",
            ) from exc
        raise Failure(
            f"{line.split('(')[0]}: no {error.__name__}",
            f"`{line}` should raise {error.__name__}{because}, but it returned "
            f"{short_repr(result)}",
        )

    def read(self, expression: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Evaluate `expression` (not recorded: reading changes nothing)."""
        try:
            return fn(*args)
        except (CheckFailed, ExerciseNotDone):
            raise
        except NotImplementedError as exc:
            raise learner_error(exc) from None
        except Exception as exc:
            raise Failure(
                f"{expression} raised {type(exc).__name__} at {where_raised(exc)}",
                f"after the last line, `{expression}` raised {type(exc).__name__}: "
                f"{exc}{where_raised(exc)}",
            ) from exc

    def fail(self, cause: str, message: str) -> None:
        raise Failure(cause, message)

    def render(self, indent: str = "    ") -> str:
        return "\n".join(indent + line for line in self.lines)


def fixed(message_intro: str, scenario: Callable[[Replay], None], replay: Replay) -> None:
    """Run a fixed scenario; a failure becomes a CheckFailed with every step listed."""
    try:
        scenario(replay)
    except Failure as failure:
        raise CheckFailed(f"{failure.message}.\n{message_intro}:\n{replay.render()}") from None
    except (CheckFailed, ExerciseNotDone):
        raise
    except Exception as exc:
        error = learner_error(exc)
        if isinstance(error, ExerciseNotDone):
            raise error from None
        raise CheckFailed(f"{error}\n{message_intro} so far:\n{replay.render()}") from None


def search(
    run: Callable[[list[Any], Replay], None],
    make_ops: Callable[[random.Random], list[Any]],
    *,
    trials: int,
    seed: int,
    what: str,
    keep: int = 1,
    max_runs: int = 400,
) -> None:
    """Random trials of `run(ops, replay)`; the first failure is shrunk, then reported.

    `make_ops(rng)` draws a trial's operations; `run` applies them to fresh objects, recording
    each line in `replay`. Operations must stay legal when others are removed (draw intents,
    resolved against the state when applied), so that any subsequence replays. The first
    `keep` entries describe the setup and are never removed.
    """
    for trial in range(trials):
        ops = make_ops(random.Random(seed * 100_003 + trial))
        failure = _attempt(run, ops)
        if failure is None:
            continue
        failure, replay = _shrink(run, ops, failure[0].cause, keep, max_runs)
        raise CheckFailed(
            f"{failure.message}.\nReplay it (random trial {trial} of {what}, seed={seed}, "
            f"shrunk to the {len(replay.lines)} lines that still fail):\n{replay.render()}"
        )


def _attempt(
    run: Callable[[list[Any], Replay], None], ops: list[Any]
) -> tuple[Failure, Replay] | None:
    replay = Replay()
    try:
        with quiet():
            run(ops, replay)
    except Failure as failure:
        return failure, replay
    return None


def _shrink(
    run: Callable[[list[Any], Replay], None],
    ops: list[Any],
    cause: str,
    keep: int,
    max_runs: int,
) -> tuple[Failure, Replay]:
    """Remove chunks of operations while the trial still fails with the same cause."""
    best = _attempt(run, ops)
    assert best is not None
    runs, chunk = 0, max(1, (len(ops) - keep) // 2)
    while chunk >= 1 and runs < max_runs and len(ops) > keep:
        i, removed = keep, False
        while i < len(ops) and runs < max_runs:
            candidate = ops[:i] + ops[i + chunk :]
            runs += 1
            result = _attempt(run, candidate)
            if result is not None and result[0].cause == cause:
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
