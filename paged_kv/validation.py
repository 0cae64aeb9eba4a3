"""Argument checks every layer shares: whole numbers and token ids.

Each returns the value as a plain int (numpy and torch integers welcome; bools and floats are
refused) or raises `InvalidArgument` naming the argument and what to pass instead.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable
from typing import SupportsIndex, cast

from paged_kv.errors import InvalidArgument


def as_int(value: object) -> int | None:
    """`value` as a plain int if it is an integer (not a bool), else None."""
    if type(value) is int:
        return value
    if isinstance(value, bool) or not isinstance(value, SupportsIndex):
        return None
    try:
        return operator.index(value)
    except TypeError:  # e.g. a tensor of floats, or of more than one element
        return None


def require_int(name: str, value: object, *, minimum: int = 0) -> int:
    """Return `value` as an int if it is one and >= `minimum`; else raise `InvalidArgument`."""
    number = as_int(value)
    if number is None or number < minimum:
        raise InvalidArgument(
            f"{name} must be an int >= {minimum}, got {value!r}; pass a whole number >= {minimum}."
        )
    return number


def require_positive_int(name: str, value: object) -> int:
    """Return `value` if it is an int >= 1, else raise `InvalidArgument` naming `name`."""
    return require_int(name, value, minimum=1)


def require_seconds(name: str, value: object, *, allow_zero: bool = False) -> float:
    """Return `value` as a float if it is a finite number of seconds > 0 (>= 0 with
    `allow_zero`); else raise `InvalidArgument` (an infinite timeout is an unbounded stall)."""
    seconds = math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value) if abs(value) < 1e300 else math.inf
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidArgument(
            f"{name} must be a finite number of seconds {bound}, got {value!r}; pass e.g. 0.25."
        )
    return seconds


MAX_TOKEN_ID = 2**63 - 1
"""The largest token id: block hashes encode each token as a signed 64-bit integer."""


def require_token_ids(
    values: Iterable[object], what: str, vocab_size: int | None = None
) -> list[int]:
    """`values` as a list of plain ints, each a token id: >= 0, and < `vocab_size` if given,
    else at most `MAX_TOKEN_ID`. Anything else (a str, None, a float) is `InvalidArgument`."""
    if isinstance(values, str) or not isinstance(values, Iterable):
        raise InvalidArgument(
            f"{what} must be a sequence of token ids, got {type(values).__name__}; pass a "
            "list of ints."
        )
    tokens = list(values)
    limit = MAX_TOKEN_ID + 1 if vocab_size is None else vocab_size
    if tokens and set(map(type, tokens)) == {int}:  # the common case, checked at C speed
        ints = cast("list[int]", tokens)  # every element is an int: its type was just checked
        if min(ints) >= 0 and max(ints) < limit:
            return ints
    for i, value in enumerate(tokens):
        token = as_int(value)
        if token is None or not 0 <= token < limit:
            raise InvalidArgument(
                f"{what} must be token ids (ints in 0..{limit - 1}); found {value!r}."
            )
        tokens[i] = token
    return cast("list[int]", tokens)  # each element was just replaced by its int
