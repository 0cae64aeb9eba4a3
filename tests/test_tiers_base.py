"""paged_kv.tiers.base: what every tier reports."""

from __future__ import annotations

import pytest
import torch

from paged_kv.cache.hashing import block_hashes
from paged_kv.tiers import DiskTier, HostTier, KeySpace, ModelFingerprint, encode_blob
from paged_kv.tiers.base import Recorder

# Behaviours that mutation testing (tools/mutation_test.py) found no test pinning, in the tiers:
# each test here kills at least one mutant that survived every other test of its module.


TOY_FP = ModelFingerprint("toy", "ab" * 32, "float32", 1, 1, 2, 2)


MUTANTS_SPACE = KeySpace("mutants", TOY_FP)


def toy_blobs(n: int) -> list[tuple[str, bytes]]:
    hashes = block_hashes(list(range(2 * n)), 2)
    return [
        (
            MUTANTS_SPACE.key(h),
            encode_blob(
                torch.full(TOY_FP.payload_shape, float(i)).numpy().tobytes(),
                dtype="float32",
                shape=TOY_FP.payload_shape,
                fingerprint=MUTANTS_SPACE.fingerprint_digest,
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
    items = toy_blobs(3)
    tier.put_many(items)
    assert recorder.last == tier.usage() == (3, sum(len(b) for _, b in items))
    assert tier.delete([items[0][0], items[2][0]]) == 2
    assert recorder.last == tier.usage() == (1, len(items[1][1]))
    tier.delete([items[1][0]])
    assert recorder.last == (0, 0)


@pytest.mark.parametrize("kind", ["host", "disk"])
def test_a_tiers_stats_count_zero_for_an_operation_it_never_did(kind, tmp_path):
    tier = make_tier(kind, tmp_path)
    tier.put_many(toy_blobs(1))
    stats = tier.stats()
    assert stats.count("put", "ok") == 1
    assert stats.count("get", "ok") == stats.count("put", "error") == 0


@pytest.mark.parametrize("kind", ["host", "disk"])
def test_a_blob_the_size_of_the_whole_budget_is_stored(kind, tmp_path):
    """The budget is inclusive: a tier of N bytes holds one blob of N bytes."""
    (key, blob), *_ = toy_blobs(1)
    tier = (
        HostTier(len(blob))
        if kind == "host"
        else DiskTier(tmp_path, capacity_bytes=len(blob), fsync=False)
    )
    assert tier.put_many([(key, blob)]) == [True]
    assert tier.get_many([key]) == [blob]
    assert tier.usage() == (1, len(blob))
