"""Behaviours that mutation testing (tools/mutation_test.py) found no test pinning, in the tiers:
each test here kills at least one mutant that survived every other test of its module."""

from __future__ import annotations

import pytest
import torch

from paged_kv.cache.hashing import block_hashes
from paged_kv.tiers import DiskTier, HostTier, KeySpace, ModelFingerprint, encode_blob
from paged_kv.tiers.base import Recorder

FP = ModelFingerprint("toy", "ab" * 32, "float32", 1, 1, 2, 2)
SPACE = KeySpace("mutants", FP)


def blobs(n: int) -> list[tuple[str, bytes]]:
    hashes = block_hashes(list(range(2 * n)), 2)
    return [
        (
            SPACE.key(h),
            encode_blob(
                torch.full(FP.payload_shape, float(i)).numpy().tobytes(),
                dtype="float32",
                shape=FP.payload_shape,
                fingerprint=SPACE.fingerprint_digest,
                block_hash=h,
            ),
        )
        for i, h in enumerate(hashes)
    ]


class UsageRecorder(Recorder):
    def __init__(self):
        self.last: tuple[int | None, int | None] | None = None

    def usage(self, tier, blocks, nbytes):
        self.last = (blocks, nbytes)


def make_tier(kind, tmp_path):
    return HostTier(1 << 20) if kind == "host" else DiskTier(tmp_path, fsync=False)


@pytest.mark.parametrize("kind", ["host", "disk"])
def test_a_tier_reports_its_usage_after_every_change(kind, tmp_path):
    """The usage gauges (blocks, bytes) follow puts and deletes, not only puts."""
    tier = make_tier(kind, tmp_path)
    tier.recorder = recorder = UsageRecorder()
    items = blobs(3)
    tier.put_many(items)
    assert recorder.last == tier.usage() == (3, sum(len(b) for _, b in items))
    assert tier.delete([items[0][0], items[2][0]]) == 2
    assert recorder.last == tier.usage() == (1, len(items[1][1]))
    tier.delete([items[1][0]])
    assert recorder.last == (0, 0)


def test_a_disk_block_removed_behind_the_tiers_back_is_a_miss_it_then_forgets(tmp_path):
    """A file that vanished (removed by hand, or by another process's eviction) is a miss
    once, then the tier no longer claims the block and a new put writes it again."""
    tier = DiskTier(tmp_path, fsync=False)
    items = blobs(2)
    keys = [k for k, _ in items]
    tier.put_many(items)
    tier.path_of(keys[0]).unlink()
    assert tier.get_many(keys) == [None, items[1][1]]
    assert tier.count_leading(keys) == 0
    assert tier.usage() == (1, len(items[1][1]))
    assert tier.put_many(items[:1]) == [True]
    assert tier.get_many(keys[:1]) == [items[0][1]]


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
