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


def test_an_operation_reported_without_a_count_counts_one_key():
    from paged_kv.tiers.metrics import TierMetrics

    metrics = TierMetrics()
    metrics.op("host", "get", "ok")
    metrics.op("host", "get", "ok", 3, seconds=0.001)
    assert metrics.value("paged_kv_tier_operations_total", tier="host", op="get", result="ok") == 4
    latency = "paged_kv_tier_operation_duration_seconds"
    assert metrics.value(f"{latency}_count", tier="host", op="get") == 1, "one timed call"
    assert metrics.value(f"{latency}_sum", tier="host", op="get") == 0.001


def test_an_admission_with_an_unknown_token_source_is_refused_and_counts_nothing():
    import pytest

    from paged_kv.errors import InvalidArgument
    from paged_kv.tiers.metrics import TierMetrics

    metrics = TierMetrics()
    with pytest.raises(InvalidArgument, match=r"unknown token sources \['gpu'\]"):
        metrics.admitted({"device": 16, "gpu": 16})
    assert metrics.snapshot().queries == 0
    assert "gpu" not in metrics.exposition()


def test_metrics_served_on_the_ipv6_loopback_are_scraped_at_their_url():
    """An IPv6 server address is (host, port, flow, scope): the endpoint keeps host and port,
    and its URL brackets the address."""
    import socket
    import urllib.request

    import pytest

    from paged_kv.tiers.metrics import TierMetrics

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as err:
        pytest.skip(f"no IPv6 loopback here ({err})")
    metrics = TierMetrics()
    metrics.op("disk", "put", "ok", 2)
    with metrics.serve(addr="::1") as server:
        assert server.host == "::1" and server.url == f"http://[::1]:{server.port}/metrics"
        with urllib.request.urlopen(server.url, timeout=5) as reply:
            text = reply.read().decode()
    assert 'paged_kv_tier_operations_total{op="put",result="ok",tier="disk"} 2.0' in text
