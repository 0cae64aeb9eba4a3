"""paged_kv.cache.hit_metrics: the prefix hit counter and its window."""

import pytest
from test_block_pool import BAD_COUNTS

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
