"""paged_kv.cache.hit_metrics: the prefix hit counter and its window."""

import pytest
from test_block_pool import BAD_COUNTS
from test_manager import BS, SHARED

from paged_kv import InvalidArgument, KVCacheManager
from paged_kv.cache import PrefixHitCounter

# The cache layer's argument checks at their edges, and its documented defaults.


@pytest.mark.parametrize("bad", BAD_COUNTS)
def test_hit_rate_window_must_be_a_positive_int(bad):
    with pytest.raises(InvalidArgument, match="window"):
        KVCacheManager(8, 4, hit_rate_window=bad)
    with pytest.raises(InvalidArgument, match="window"):
        PrefixHitCounter(bad)


def test_a_hit_rate_window_of_one_keeps_the_latest_request_only():
    m = KVCacheManager(16, 4, hit_rate_window=1)
    m.add_sequence("a", list(range(9)))
    m.add_sequence("b", list(range(9)))  # 8 of 9 hit
    rates = m.hit_rates()
    assert (rates.window_requests, rates.window_queried_tokens, rates.window_hit_tokens) == (
        1,
        9,
        8,
    )
    assert (rates.queried_tokens, rates.hit_tokens) == (18, 8)
    m.add_sequence("c", [50] * 5)  # no hits; b's 8 hit tokens leave the window
    rates = m.hit_rates()
    assert (rates.window_requests, rates.window_queried_tokens, rates.window_hit_tokens) == (
        1,
        5,
        0,
    )
    assert (rates.queried_tokens, rates.hit_tokens) == (23, 8)


# Prefix caching: chained hashes, sharing, salts, forks with copy-on-write, reset, metrics.


def test_hit_rates_over_all_requests_and_a_window():
    m = KVCacheManager(32, BS, hit_rate_window=2)
    m.add_sequence("a", [*SHARED, 1])  # 13 queried, 0 hit
    m.add_sequence("b", [*SHARED, 2])  # 13 queried, 12 hit
    m.add_sequence("c", [*SHARED, 3])
    rates = m.hit_rates()
    assert (rates.queried_tokens, rates.hit_tokens) == (39, 24)
    assert rates.window_requests == 2 and rates.window_hit_rate == pytest.approx(24 / 26)


def test_hit_counter_window_keeps_running_sums():
    counter = PrefixHitCounter(window=3)
    for q, h in [(10, 0), (10, 10), (10, 5), (10, 1)]:
        counter.record(q, h)
    rates = counter.rates()
    assert rates.hit_rate == pytest.approx(16 / 40)
    assert rates.window_hit_rate == pytest.approx(16 / 30)
