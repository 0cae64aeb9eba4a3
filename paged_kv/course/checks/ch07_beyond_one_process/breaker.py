"""Exercise 3 of chapter 07: the learner's circuit breaker opens after failures in a row,
refuses calls for the cooldown, lets one trial through, and closes or reopens like the
library's."""

from __future__ import annotations

import random

from paged_kv.course.checks.failures import exercise, expect, expect_raises, passed
from paged_kv.tiers.breaker import CircuitBreaker


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@exercise(3, "MyBreaker")
def check_circuit_breaker(cls: type) -> None:
    """`cls(failure_threshold, cooldown_s, clock=...)` has `allow()`, `record_success()`,
    `record_failure()` and `state` ("closed", "open" or "half-open") like the library's."""
    clock = _Clock()
    breaker = cls(3, 2.0, clock=clock)
    expect(breaker.state == "closed", f"a new breaker is closed, yours is {breaker.state!r}.")
    for i in range(2):
        expect(breaker.allow(), "a closed breaker lets every call through.")
        breaker.record_failure()
        expect(
            breaker.state == "closed",
            f"after {i + 1} failure(s) with failure_threshold=3 it must still be closed.",
        )
    breaker.allow()
    breaker.record_success()
    for _ in range(2):
        breaker.allow()
        breaker.record_failure()
    expect(
        breaker.state == "closed",
        "a success resets the count: failures must be *in a row* to open the breaker.",
    )
    breaker.allow()
    breaker.record_failure()
    expect(breaker.state == "open", "3 failures in a row open the breaker.")
    expect(
        not breaker.allow(),
        "an open breaker refuses calls at once (the engine recomputes instead of waiting).",
    )
    clock.now += 1.99
    expect(not breaker.allow(), "it stays open for the whole cooldown (2 s here).")
    clock.now += 0.01
    expect(breaker.allow(), "after the cooldown, one trial call is allowed.")
    expect(breaker.state == "half-open", "while the trial call runs, the state is 'half-open'.")
    expect(
        not breaker.allow(),
        "only one trial call at a time: a second call while half-open is refused.",
    )
    breaker.record_failure()
    expect(
        breaker.state == "open" and not breaker.allow(),
        "a failed trial opens the breaker again, for a new cooldown.",
    )
    clock.now += 2.0
    expect(breaker.allow(), "after another cooldown, another trial.")
    breaker.record_success()
    expect(
        breaker.state == "closed" and breaker.allow(),
        "a successful trial closes the breaker: the store is back in use.",
    )
    expect_raises(Exception, lambda: cls(0, 1.0, clock=clock), "failure_threshold=0")
    rng = random.Random(11)
    for trial in range(100):
        threshold, cooldown = rng.randint(1, 4), rng.choice([0.0, 0.5, 1.0])
        c1, c2 = _Clock(), _Clock()
        mine = cls(threshold, cooldown, clock=c1)
        ref = CircuitBreaker(threshold, cooldown, clock=c2)
        history = []
        for _ in range(30):
            step = rng.random()
            if step < 0.2:
                dt = rng.choice([0.1, 0.5, 1.0])
                c1.now += dt
                c2.now += dt
                history.append(f"+{dt}s")
                continue
            a, b = mine.allow(), ref.allow()
            history.append("allow")
            expect(
                a == b,
                f"random run {trial} (threshold {threshold}, cooldown {cooldown}): after "
                f"{history}, allow() returned {a}, the reference {b}.",
            )
            if a:
                ok = rng.random() < 0.4
                (mine.record_success if ok else mine.record_failure)()
                (ref.record_success if ok else ref.record_failure)()
                history.append("success" if ok else "failure")
            expect(
                mine.state == ref.state,
                f"random run {trial}: after {history} the state is {mine.state!r}, the "
                f"reference's {ref.state!r}.",
            )
    passed("opens, waits and closes like the library's, on 100 random runs")
