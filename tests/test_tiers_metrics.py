"""paged_kv.tiers.metrics: the Prometheus recorder."""

from __future__ import annotations

# Behaviours that mutation testing (tools/mutation_test.py) found no test pinning, in the tiers:
# each test here kills at least one mutant that survived every other test of its module.


def test_the_prometheus_recorder_shows_every_report_in_its_metric():
    """What the tiers and the store report reaches its series: gauges hold the latest value
    (a queue that drains shows 0 again), counters add up."""
    from paged_kv.tiers.metrics import TierMetrics

    metrics = TierMetrics()
    for depth in (3, 5, 0):
        metrics.queue_depth("disk", depth)
        assert metrics.value("paged_kv_tier_write_queue_blocks", tier="disk") == depth
    for is_up in (False, True, False):
        metrics.up("remote", is_up)
        assert metrics.value("paged_kv_tier_up", tier="remote") == int(is_up)
    metrics.usage("host", 4, 400)
    metrics.usage("host", None, None)  # unknown: the last known values stay
    assert metrics.value("paged_kv_tier_blocks", tier="host") == 4
    assert metrics.value("paged_kv_tier_used_bytes", tier="host") == 400
    metrics.evicted("host", 2)
    metrics.evicted("host", 1)
    assert metrics.value("paged_kv_tier_evictions_total", tier="host") == 3
    metrics.moved("disk", "read", 10)
    metrics.moved("disk", "read", 5)
    assert metrics.value("paged_kv_tier_bytes_total", tier="disk", direction="read") == 15
    metrics.corrupt("disk", "checksum")
    assert metrics.value("paged_kv_tier_corrupt_blocks_total", tier="disk", reason="checksum") == 1
