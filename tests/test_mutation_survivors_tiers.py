"""Behaviours that mutation testing (tools/mutation_test.py) found no test pinning, in the tiers:
each test here kills at least one mutant that survived every other test of its module."""

from __future__ import annotations

import threading

import pytest
import torch

from paged_kv.cache.hashing import block_hashes
from paged_kv.tiers import (
    DiskTier,
    HostTier,
    KeySpace,
    ModelFingerprint,
    TieredStore,
    encode_blob,
)
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


def test_the_redis_tier_asks_a_hung_server_once_per_call():
    """No retry behind the breaker's back: a server that accepts and never answers costs one
    connection and one timeout per call, and the call counts as an error."""
    import socket
    import threading

    from paged_kv.tiers.redis_tier import RedisTier

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted = []

    def accept():
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        tier = RedisTier(
            f"redis://127.0.0.1:{server.getsockname()[1]}/0",
            socket_timeout=0.1,
            connect_timeout=0.1,
            failure_threshold=10,
        )
        assert tier.contains([SPACE.key(b"\x00" * 32)]) == [False]
        assert len(accepted) == 1
        assert tier.stats().operations == {("contains", "error"): 1}
        tier.close()
    finally:
        server.close()
        for conn in accepted:
            conn.close()


# -- fingerprints ----------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["num_layers", "num_kv_heads", "head_dim", "block_size"])
@pytest.mark.parametrize("bad", [0, -2, 1.5])
def test_a_fingerprint_refuses_sizes_that_are_not_positive_ints(field, bad):
    """A fingerprint names the payload's shape; a zero or fractional size names none."""
    from paged_kv.errors import InvalidArgument

    sizes = {"num_layers": 1, "num_kv_heads": 1, "head_dim": 2, "block_size": 2, field: bad}
    with pytest.raises(InvalidArgument, match=field):
        ModelFingerprint("toy", "ab" * 32, "float32", **sizes)


# -- the store and the connector -------------------------------------------------------------


class SlowTier(HostTier):
    """A "disk" tier whose first write waits for `release`, recording every key written."""

    def __init__(self):
        super().__init__(1 << 20)
        self.name = "disk"
        self.release = threading.Event()
        self.written: list[str] = []

    def put_many(self, items):
        self.release.wait(10)
        self.written += [k for k, _ in items]
        return super().put_many(items)


def payloads(n: int) -> list[bytes]:
    return [torch.full(FP.payload_shape, float(i)).numpy().tobytes() for i in range(n)]


def test_a_block_offered_again_while_its_write_is_pending_is_written_once():
    tier = SlowTier()
    store = TieredStore([tier], metrics=None)
    space = store.key_space(FP)
    hashes = block_hashes(list(range(4)), 2)
    try:
        for _ in range(3):
            store.save(space, hashes, payloads(2))
        assert store.queue_depths()["disk"] == 2  # not 6
        tier.release.set()
        assert store.flush(10)
        assert sorted(tier.written) == sorted(space.keys(hashes))
    finally:
        tier.release.set()
        store.close()


def test_a_store_reports_what_its_tiers_hold_from_the_start(tmp_path):
    """A warm disk tier (a restart) shows its blocks in the metrics before any call."""
    DiskTier(tmp_path, fsync=False).put_many(blobs(3))
    store = TieredStore([DiskTier(tmp_path, fsync=False)], metrics=True)
    try:
        assert store.metrics.value("paged_kv_tier_blocks", tier="disk") == 3
        assert store.metrics.value("paged_kv_tier_used_bytes", tier="disk") == sum(
            len(b) for _, b in blobs(3)
        )
    finally:
        store.close()


def _connector(store, staging_blocks):
    from paged_kv.cache.manager import KVCacheManager
    from paged_kv.tiers.connector import KVConnector

    manager = KVCacheManager(num_blocks=16, block_size=FP.block_size)
    return KVConnector(store, manager, None, FP, staging_blocks=staging_blocks)


def test_the_connector_serves_a_priced_request_from_its_staged_blocks():
    """Blocks verified while pricing a request stay staged until it is admitted: pricing it
    again after the tier lost them still finds them."""
    from paged_kv.cache.sequence import TokenSequence

    host = HostTier(1 << 20)
    store = TieredStore([host], metrics=None)
    connector = _connector(store, staging_blocks=8)
    seq = TokenSequence(list(range(7)))  # 3 full blocks before the last token
    hashes = seq.full_block_hashes(FP.block_size)
    store.save(store.key_space(FP), hashes[:3], payloads(3))
    assert connector.loadable_tokens(seq, 0) == 6
    host.delete(store.key_space(FP).keys(hashes[:3]))
    assert connector.loadable_tokens(seq, 0) == 6


def test_the_connector_stages_at_most_staging_blocks():
    """Staging is bounded: the oldest staged blocks go first, and a request whose first block
    left staging (and the tier) loads nothing."""
    from paged_kv.cache.sequence import TokenSequence

    host = HostTier(1 << 20)
    store = TieredStore([host], metrics=None)
    connector = _connector(store, staging_blocks=2)
    seq = TokenSequence(list(range(7)))
    hashes = seq.full_block_hashes(FP.block_size)
    store.save(store.key_space(FP), hashes[:3], payloads(3))
    assert connector.loadable_tokens(seq, 0) == 6
    host.delete(store.key_space(FP).keys(hashes[:3]))
    assert connector.loadable_tokens(seq, 0) == 0


@pytest.mark.parametrize(
    "block_hash",
    [b"\x01" * 31, b"\x01" * 33, b"", "ab" * 16, None],
    ids=["31-bytes", "33-bytes", "empty", "hex-text", "none"],
)
def test_encoding_refuses_a_block_hash_that_is_not_a_32_byte_digest(block_hash):
    """A short hash would be padded with zeros and a long one cut, silently naming another
    block in the header; anything else is refused with what to pass."""
    from paged_kv.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="block_hash must be 32 bytes"):
        encode_blob(
            payloads(1)[0],
            dtype="float32",
            shape=FP.payload_shape,
            fingerprint=SPACE.fingerprint_digest,
            block_hash=block_hash,
        )
