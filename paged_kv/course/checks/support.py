"""What every chapter's checks share: the failure type, expectations, and counting work.

A check raises `CheckFailed` with a message that says what was expected and what happened.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


class CheckFailed(AssertionError):
    """The learner's code did something the chapter's rules forbid; the message says what."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def passed(what: str) -> None:
    print(f"✅ {what}: all checks passed")


def expect_raises(error: type[Exception], action: Callable[[], Any], what: str) -> None:
    try:
        action()
    except error:
        return
    except NotImplementedError:
        raise
    except Exception as exc:  # the wrong error type is a learner mistake worth naming
        raise CheckFailed(f"{what} should raise {error.__name__}, but raised {exc!r}.") from exc
    raise CheckFailed(f"{what} should raise {error.__name__}, but returned normally.")


def count_lines_executed(fn: Callable[[], Any]) -> int:
    """How many Python source lines `fn()` executes (C built-ins count as one line)."""
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        fn()
    finally:
        sys.settrace(previous)
    return count
