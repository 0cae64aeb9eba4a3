"""A circuit breaker: stop calling a remote store that keeps failing, try again later.

Timeouts bound one call; the breaker bounds how many calls a dead store can cost. It is
*closed* (calls go through) until `failure_threshold` calls in a row fail; then *open* (calls
are refused at once, the caller serves by recompute) for `cooldown_s`; then *half-open*: one
trial call goes through. If it succeeds the breaker closes, if it fails it opens again for
another cooldown. While a store is down, the engine loses at most `failure_threshold`
timeouts, plus one per cooldown for the trial.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from paged_kv.errors import InvalidArgument
from paged_kv.validation import require_positive_int, require_seconds

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half-open"


class CircuitBreaker:
    """closed → open after `failure_threshold` consecutive failures; open → half-open after
    `cooldown_s`; half-open lets one trial call through: success closes, failure reopens.
    Thread-safe. `clock` is injectable for tests (seconds, monotonic)."""

    def __init__(
        self,
        failure_threshold: int = 3,
        cooldown_s: float = 1.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failure_threshold = require_positive_int("failure_threshold", failure_threshold)
        if not callable(clock):
            raise InvalidArgument(f"clock is a function returning seconds, got {clock!r}.")
        self.cooldown_s = require_seconds("cooldown_s", cooldown_s, allow_zero=True)
        self.clock = clock
        self.state = CLOSED
        self.failures = 0  # consecutive failures while closed
        self.opened_at = 0.0
        self.times_opened = 0
        self._lock = threading.Lock()

    def allow(self) -> bool:
        """May a call go through now? In half-open state only one trial call may."""
        with self._lock:
            if self.state == CLOSED:
                return True
            if self.state == OPEN and self.clock() - self.opened_at >= self.cooldown_s:
                self.state = HALF_OPEN
                return True  # the one trial call
            return False

    def record_success(self) -> None:
        """The call that was allowed succeeded."""
        with self._lock:
            self.state = CLOSED
            self.failures = 0

    def record_failure(self) -> None:
        """The call that was allowed failed (error or timeout)."""
        with self._lock:
            self.failures += 1
            if self.state == HALF_OPEN or self.failures >= self.failure_threshold:
                if self.state != OPEN:
                    self.times_opened += 1
                self.state = OPEN
                self.opened_at = self.clock()
                self.failures = 0

    @property
    def is_closed(self) -> bool:
        return self.state == CLOSED

    def __repr__(self) -> str:
        return f"CircuitBreaker({self.state}, {self.failures} failures in a row)"
