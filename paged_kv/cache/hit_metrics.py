"""Counters the manager keeps: prefix-cache queries and hits, overall and over recent requests.

Everything is O(1) per request: the window keeps running sums, not a list to add up.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from paged_kv.validation import require_positive_int


@dataclass(frozen=True)
class HitRates:
    """Prefix-cache hit rates in tokens: since the start and over the last requests."""

    queried_tokens: int
    hit_tokens: int
    window_queried_tokens: int
    window_hit_tokens: int
    window_requests: int

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.queried_tokens if self.queried_tokens else 0.0

    @property
    def window_hit_rate(self) -> float:
        return (
            self.window_hit_tokens / self.window_queried_tokens
            if self.window_queried_tokens
            else 0.0
        )


class PrefixHitCounter:
    """Token-level queries and hits, with a sliding window over the last `window` requests."""

    def __init__(self, window: int = 100) -> None:
        self.window = require_positive_int("window", window)
        self._recent: deque[tuple[int, int]] = deque()
        self._totals = [0, 0]
        self._window_sums = [0, 0]

    def record(self, queried_tokens: int, hit_tokens: int) -> None:
        """One request asked about `queried_tokens` prompt tokens and found `hit_tokens`."""
        self._recent.append((queried_tokens, hit_tokens))
        for sums in (self._totals, self._window_sums):
            sums[0] += queried_tokens
            sums[1] += hit_tokens
        if len(self._recent) > self.window:
            old_q, old_h = self._recent.popleft()
            self._window_sums[0] -= old_q
            self._window_sums[1] -= old_h

    def rates(self) -> HitRates:
        (queried, hit), (window_queried, window_hit) = self._totals, self._window_sums
        return HitRates(queried, hit, window_queried, window_hit, len(self._recent))
