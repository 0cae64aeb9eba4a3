"""Host and disk tiers, the store, the circuit breaker, the engine hook, crash safety, warm
restarts and metrics (acceptance tests 2, 3 and 9; 7 on disk). No server needed."""

from __future__ import annotations

import functools
import json
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families
from tiers_helpers import (
    BLOCK,
    DISK_WRITER,
    model,
    question,
    reference_tokens,
    run_worker,
    system_prompt,
)

from paged_kv.cache.hashing import block_hashes
from paged_kv.cache.manager import KVCacheManager
from paged_kv.errors import InvalidArgument
from paged_kv.serving.engine import Engine
from paged_kv.serving.model import TinyLM
from paged_kv.serving.scheduler import Request, SamplingParams, Scheduler, StepPlan
from paged_kv.tiers import (
    CircuitBreaker,
    DiskTier,
    HostTier,
    KeySpace,
    ModelFingerprint,
    TieredStore,
    decode_blob,
    encode_blob,
    fingerprint_model,
    longest_run,
)
from paged_kv.tiers.base import Tier
from paged_kv.tiers.breaker import CLOSED, HALF_OPEN, OPEN

FP = ModelFingerprint("toy", "ab" * 32, "float32", 1, 1, 2, 2)  # payload: 1*2*2*1*2 floats
SPACE = KeySpace("test", FP)


def chain(n: int, salt: str | None = None, start: int = 0) -> list[bytes]:
    return block_hashes(list(range(start, start + 2 * n)), 2, salt=salt)


def payload(i: int) -> bytes:
    return torch.full(FP.payload_shape, float(i)).numpy().tobytes()


def blobs(hashes: list[bytes]) -> list[tuple[str, bytes]]:
    return [
        (
            SPACE.key(h),
            encode_blob(
                payload(i),
                dtype="float32",
                shape=FP.payload_shape,
                fingerprint=SPACE.fingerprint_digest,
                block_hash=h,
            ),
        )
        for i, h in enumerate(hashes)
    ]


BLOB_SIZE = len(blobs(chain(1))[0][1])


# -- host tier -------------------------------------------------------------------------------


def test_host_tier_answers_the_five_operations():
    tier = HostTier(10 * BLOB_SIZE)
    items = blobs(chain(4))
    keys = [k for k, _ in items]
    assert tier.put_many(items[:3]) == [True, True, True]
    assert tier.count_leading(keys) == 3 and tier.count_leading(keys[1:]) == 2
    assert tier.get_many([keys[0], keys[3]]) == [items[0][1], None]
    assert tier.delete([keys[1], keys[3]]) == 1
    assert tier.count_leading(keys) == 1
    stats = tier.stats()
    assert (stats.blocks, stats.used_bytes) == (2, 2 * BLOB_SIZE)
    assert stats.count("get", "ok") == 1 and stats.count("get", "miss") == 1
    assert stats.bytes_written == 3 * BLOB_SIZE and stats.bytes_read == BLOB_SIZE


def test_host_tier_evicts_the_tails_of_runs_first():
    tier = HostTier(3 * BLOB_SIZE)
    keys = [k for k, _ in blobs(chain(4))]
    tier.put_many(blobs(chain(4)))
    assert tier.count_leading(keys) == 3, "the head blocks stay, the tail goes"
    assert tier.stats().evictions == 1
    other = blobs(chain(2, start=100))
    tier.get_many(keys[:3])  # the first run is used again: its tail still goes before its head
    tier.put_many(other)
    assert tier.count_leading(keys) == 1
    assert tier.count_leading([k for k, _ in other]) == 2


@pytest.mark.parametrize(("policy", "survives"), [("lru", False), ("lfu", True)])
def test_host_tier_evicts_with_the_chapter_03_policies(policy, survives):
    tier = HostTier(4 * BLOB_SIZE, eviction=policy)
    hot = blobs(chain(2))
    tier.put_many(hot)
    for _ in range(5):
        tier.get_many([k for k, _ in hot])
    for i in range(3):  # a scan of one-off blocks
        tier.put_many(blobs(chain(1, start=1000 + 10 * i)))
    assert (tier.count_leading([k for k, _ in hot]) == 2) is survives


def test_a_blob_bigger_than_the_whole_budget_is_refused_and_evicts_nothing():
    tier = HostTier(BLOB_SIZE + 10)
    tier.put_many(blobs(chain(1)))
    assert tier.put_many([("test:" + "0" * 32 + ":" + "1" * 64, b"x" * (BLOB_SIZE + 11))]) == [
        False
    ]
    assert tier.usage() == (1, BLOB_SIZE)


# -- disk tier -------------------------------------------------------------------------------


def test_disk_tier_writes_one_file_per_block_and_no_temporary_file(tmp_path):
    tier = DiskTier(tmp_path)
    items = blobs(chain(3))
    assert tier.put_many(items) == [True] * 3
    files = sorted(tmp_path.rglob("*"))
    assert [p for p in files if p.name.endswith(".tmp")] == []
    assert sum(1 for p in files if p.suffix == ".kvb") == 3
    assert tier.path_of(items[0][0]).read_bytes() == items[0][1]
    assert tier.get_many([k for k, _ in items]) == [b for _, b in items]
    assert tier.put_many(items[:1]) == [True]  # already there: nothing rewritten
    assert tier.stats().bytes_written == 3 * BLOB_SIZE
    assert tier.delete([items[1][0]]) == 1 and not tier.path_of(items[1][0]).exists()
    assert tier.count_leading([k for k, _ in items]) == 1


def test_disk_tier_rebuilds_its_index_removes_temporary_files_and_quarantines_bad_ones(tmp_path):
    tier = DiskTier(tmp_path)
    items = blobs(chain(5))
    tier.put_many(items)
    keys = [k for k, _ in items]
    paths = [tier.path_of(k) for k in keys]
    (paths[0].parent / ".half-written.123.ab.tmp").write_bytes(b"PKVB torn")
    paths[1].write_bytes(paths[1].read_bytes()[:-3])  # truncated
    flipped = bytearray(paths[2].read_bytes())
    flipped[-1] ^= 0x10
    paths[2].write_bytes(bytes(flipped))  # a flipped bit
    paths[3].write_bytes(items[4][1])  # another block's blob under this name
    (tmp_path / "notes.txt").write_text("not a block")
    restarted = DiskTier(tmp_path)
    assert restarted.recovery == {
        "blocks": 2,
        "removed_temporary_files": 1,
        "quarantined": 4,
        "evicted": 0,
    }
    assert restarted.count_leading(keys) == 1 and restarted.count_leading(keys[4:]) == 1
    assert len(list((tmp_path / "quarantine").iterdir())) == 4
    assert not list(tmp_path.rglob("*.tmp"))
    assert restarted.stats().corrupt == 4
    for key in restarted.stored_keys():  # every visible block verifies
        decode_blob(restarted.get_many([key])[0], fingerprint=FP.digest(), block_hash=None)


def test_disk_tier_keeps_a_byte_budget(tmp_path):
    tier = DiskTier(tmp_path, capacity_bytes=3 * BLOB_SIZE)
    keys = [k for k, _ in blobs(chain(5))]
    tier.put_many(blobs(chain(5)))
    assert tier.count_leading(keys) == 3 and tier.stats().evictions == 2
    assert sum(1 for p in tmp_path.rglob("*.kvb")) == 3
    assert DiskTier(tmp_path, capacity_bytes=2 * BLOB_SIZE).recovery["evicted"] == 1


def test_a_failed_disk_write_is_a_false_result_not_an_exception(tmp_path):
    tier = DiskTier(tmp_path)
    (tmp_path / "test").write_text("a file where the namespace directory should be")
    assert tier.put_many(blobs(chain(2))) == [False, False]
    assert tier.stats().count("put", "error") == 2


# -- the store -------------------------------------------------------------------------------


class SetTier(Tier):
    """A tier that is a set of keys (and blobs), for the run logic."""

    def __init__(self, name, items=()):
        super().__init__(name)
        self.data = dict(items)
        self.calls = 0

    def count_leading(self, keys):
        self.calls += 1
        n = 0
        for k in keys:
            if k not in self.data:
                break
            n += 1
        return n

    def get_many(self, keys, max_bytes=None):
        return [self.data.get(k) for k in keys]

    def put_many(self, items):
        self.data.update(items)
        return [True] * len(items)

    def delete(self, keys):
        return sum(self.data.pop(k, None) is not None for k in keys)

    def usage(self):
        return len(self.data), None


def test_longest_run_takes_each_block_from_the_fastest_tier_and_stops_at_the_first_gap():
    items = blobs(chain(8))
    keys = [k for k, _ in items]
    host = SetTier("host", [items[0], items[3]])
    disk = SetTier("disk", [items[0], items[1], items[2]])
    remote = SetTier("remote", [items[4], items[6], items[7]])
    run = longest_run(keys, [host, disk, remote])
    assert [t.name for t in run] == ["host", "disk", "disk", "host", "remote"]
    assert longest_run(keys[6:], [host, disk, remote]) == [remote, remote]
    assert longest_run(keys, [remote]) == [] and longest_run([], [host]) == []


def test_load_run_verifies_each_block_and_stops_at_a_bad_one_which_is_counted_and_deleted(
    tmp_path,
):
    hashes = chain(5)
    items = blobs(hashes)
    host = HostTier(1 << 20)
    disk = DiskTier(tmp_path)
    store = TieredStore([host, disk], metrics=True)
    host.put_many(items[:2])
    disk.put_many(items)
    path = disk.path_of(items[3][0])
    damaged = bytearray(path.read_bytes())
    damaged[-1] ^= 0x01
    path.write_bytes(bytes(damaged))
    loaded = store.load_run(SPACE, hashes)
    assert [b.tier for b in loaded] == ["host", "host", "disk"]
    assert [bytes(b.payload) for b in loaded] == [payload(i) for i in range(3)]
    assert not path.exists() and disk.count_leading([items[3][0]]) == 0
    assert disk.stats().corrupt == 1
    assert (
        store.metrics.value(
            "paged_kv_tier_corrupt_blocks_total", tier="disk", reason="payload checksum"
        )
        == 1
    )
    assert host.count_leading([k for k, _ in items]) == 3, "the disk block was copied up"
    assert store.load_run(SPACE, hashes)[-1].tier == "host"
    store.close()


def test_load_run_refuses_another_models_blob_under_our_key(tmp_path):
    host = HostTier(1 << 20)
    store = TieredStore([host], metrics=None)
    hashes = chain(2)
    other = KeySpace("test", ModelFingerprint("other", "cd" * 32, "float32", 1, 1, 2, 2))
    forged = [(SPACE.key(h), b) for h, (_, b) in zip(hashes, blobs_for(other, hashes), strict=True)]
    host.put_many(forged)
    assert store.load_run(SPACE, hashes) == []
    assert host.stats().corrupt == 1 and host.count_leading([SPACE.key(hashes[0])]) == 0


def blobs_for(space, hashes):
    return [
        (
            space.key(h),
            encode_blob(
                payload(i),
                dtype="float32",
                shape=space.fingerprint.payload_shape,
                fingerprint=space.fingerprint_digest,
                block_hash=h,
            ),
        )
        for i, h in enumerate(hashes)
    ]


class SlowTier(SetTier):
    """Writes wait until `release` is set: the queue in front of it fills up."""

    def __init__(self):
        super().__init__("disk")
        self.release = threading.Event()

    def put_many(self, items):
        self.release.wait(10)
        return super().put_many(items)


def test_the_write_queue_is_bounded_and_a_dropped_write_is_a_future_miss_never_a_wrong_hit():
    slow = SlowTier()
    store = TieredStore([slow], queue_blocks=2, batch_blocks=1)
    hashes = chain(6)
    store.save(SPACE, hashes, [payload(i) for i in range(6)])
    time.sleep(0.1)
    dropped = slow.stats().count("put", "dropped")
    assert dropped >= 3, "a full queue drops the work instead of blocking the engine"
    slow.release.set()
    assert store.flush(5)
    stored = len(slow.data)
    assert stored == 6 - dropped
    loaded = store.load_run(SPACE, hashes)
    assert [bytes(b.payload) for b in loaded] == [payload(i) for i in range(len(loaded))]
    assert (
        store.metrics.value(
            "paged_kv_tier_operations_total", tier="disk", op="put", result="dropped"
        )
        == dropped
    )
    store.close()


def test_a_store_takes_distinct_tiers_and_names_them():
    with pytest.raises(InvalidArgument, match="distinct"):
        TieredStore([HostTier(100), HostTier(100)])
    with pytest.raises(InvalidArgument, match="namespace"):
        TieredStore([], namespace="bad name")
    store = TieredStore([HostTier(100)], metrics=None)
    with pytest.raises(InvalidArgument, match="no 'disk' tier"):
        store.tier("disk")
    with pytest.raises(InvalidArgument, match="one payload per block"):
        store.save(SPACE, chain(2), [payload(0)])


# -- the circuit breaker ---------------------------------------------------------------------


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_breaker_opens_after_failures_in_a_row_and_lets_one_trial_through_after_cooldown():
    clock = Clock()
    breaker = CircuitBreaker(3, 1.0, clock=clock)
    for _ in range(2):
        assert breaker.allow()
        breaker.record_failure()
    assert breaker.allow()
    breaker.record_success()  # a success resets the count
    for _ in range(3):
        assert breaker.allow()
        breaker.record_failure()
    assert breaker.state == OPEN and not breaker.allow()
    clock.now = 0.99
    assert not breaker.allow()
    clock.now = 1.0
    assert breaker.allow() and breaker.state == HALF_OPEN
    assert not breaker.allow(), "only one trial call while half-open"
    breaker.record_failure()
    assert breaker.state == OPEN and not breaker.allow()
    clock.now = 2.5
    assert breaker.allow()
    breaker.record_success()
    assert breaker.state == CLOSED and breaker.allow() and breaker.times_opened == 2
    with pytest.raises(InvalidArgument):
        CircuitBreaker(0)
    with pytest.raises(InvalidArgument):
        CircuitBreaker(1, -1)


# -- the manager and scheduler hooks ---------------------------------------------------------


def test_the_manager_counts_loaded_blocks_as_cached_and_refuses_impossible_counts():
    manager = KVCacheManager(16, 4)
    manager.add_sequence("a", list(range(9)))
    manager.free_sequence("a")  # two full blocks cached
    for bad in (3, 8, -4, 4.0):  # not whole blocks / covers the last token / not an int
        with pytest.raises(InvalidArgument, match="num_loaded_tokens"):
            manager.add_sequence("b", list(range(13)), num_loaded_tokens=bad)
    assert "b" not in manager and manager.stats().num_cached_blocks == 2
    manager.add_sequence("b", list(range(13)), num_loaded_tokens=4)
    assert manager.num_cached_tokens("b") == 12  # 8 device hits + 4 loaded
    assert manager.hit_rates().hit_tokens == 8, "the manager's own hit rate is device hits"


class FixedLoader:
    def __init__(self, tokens):
        self.tokens, self.asked = tokens, []

    def loadable_tokens(self, sequence, device_hit_tokens):
        self.asked.append((len(sequence), device_hit_tokens))
        return self.tokens


def test_the_scheduler_prices_a_request_with_the_blocks_it_can_load():
    loader = FixedLoader(16)
    scheduler = Scheduler(KVCacheManager(32, 4), max_batch_tokens=12, max_running=4, loader=loader)
    for i in range(2):
        scheduler.add(Request(i, list(range(20 * i, 20 * i + 20)), SamplingParams()))
    plan = StepPlan(0, 12)
    scheduler.admit_waiting(plan)
    got = [(c.request.request_id, c.start, c.num_tokens) for c in plan.chunks]
    assert got == [(0, 16, 4), (1, 16, 4)], "each costs 20 - 16 loaded tokens"
    assert loader.asked == [(20, 0), (20, 0)]


# -- the engine ------------------------------------------------------------------------------

PROMPTS = [
    system_prompt(96) + question(q)
    for q in ("What is paging?", "Why blocks?", "Who evicts?", "When to preempt?")
]


def test_engine_with_tiers_gives_the_same_tokens_through_evictions_and_preemptions(tmp_path):
    want = reference_tokens(PROMPTS * 2, 24)
    store = TieredStore([HostTier(64 * 8448), DiskTier(tmp_path)])
    engine = Engine(model(), num_blocks=14, block_size=BLOCK, max_running=4, store=store)
    got = [c.token_ids for c in engine.generate(PROMPTS * 2, 24)]
    assert got == want
    stats = engine.stats()
    assert stats.preemptions and stats.evictions, "the pool was tight enough to force both"
    snap = store.metrics.snapshot()
    assert snap.hits["host"] > 0, "evicted prefix blocks came back from host memory"
    store.close()


def test_a_working_set_bigger_than_the_device_pool_is_served_from_host_memory():
    # Six prompts of five blocks each, no prefix in common, taken in turn: 30 blocks of
    # working set for a pool of 12, so the device's LRU cache never has the next one.
    prompts = [question(f"Topic {i}. ") + system_prompt(70) for i in range(6)] * 3
    want = reference_tokens(prompts, 4)
    runs = {}
    for host in (False, True):
        store = TieredStore([HostTier(1 << 22)] if host else [])
        engine = Engine(model(), num_blocks=12, block_size=BLOCK, max_running=1, store=store)
        assert [c.token_ids for c in engine.generate(prompts, 4)] == want
        runs[host] = (engine.stats().prefill_tokens_computed, store.metrics.snapshot())
    (cold, _), (warm, snap) = runs[False], runs[True]
    assert warm < cold / 2, f"host memory should save most prefill: {warm} vs {cold}"
    assert snap.hits["host"] == 12 * 4 * BLOCK, "every repeat loads its 4 full blocks"
    assert snap.hits["device"] == 0


def test_salted_requests_never_share_blocks_through_a_tier():
    store = TieredStore([HostTier(1 << 22)])
    first = Engine(model(), num_blocks=64, block_size=BLOCK, store=store)
    first.generate(PROMPTS[:1], 4, salt="tenant-a")
    for salt, expect_hits in (("tenant-b", False), (None, False), ("tenant-a", True)):
        engine = Engine(model(), num_blocks=64, block_size=BLOCK, store=store)
        before = store.metrics.snapshot().hits["host"]
        out = engine.generate(PROMPTS[:1], 4, salt=salt)
        assert out[0].token_ids == reference_tokens(PROMPTS[:1], 4)[0]
        assert (store.metrics.snapshot().hits["host"] > before) is expect_hits, salt


def test_a_bfloat16_engine_stores_and_loads_its_blocks_exactly():
    bf16 = TinyLM(seed=0).to(torch.bfloat16)
    plain = Engine(bf16, num_blocks=64, block_size=BLOCK)
    want = [c.token_ids for c in plain.generate(PROMPTS[:2], 8)]
    store = TieredStore([HostTier(1 << 22)])
    Engine(bf16, num_blocks=64, block_size=BLOCK, store=store).generate(PROMPTS[:2], 8)
    again = Engine(bf16, num_blocks=64, block_size=BLOCK, store=store)
    assert [c.token_ids for c in again.generate(PROMPTS[:2], 8)] == want
    assert store.metrics.snapshot().hits["host"] > 0
    assert fingerprint_model(bf16, BLOCK).dtype == "bfloat16"


def test_an_engine_without_a_store_has_no_metrics_and_says_how_to_get_them(tmp_path):
    with pytest.raises(InvalidArgument, match="store="):
        Engine(model(), num_blocks=8).metrics_text()
    with pytest.raises(InvalidArgument, match="TieredStore"):
        Engine(model(), num_blocks=8, store=[HostTier(100)])
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidArgument, match="directory"):
        DiskTier(tmp_path / "file")


@pytest.mark.parametrize(
    "engine_args",
    [
        {"prefix_caching": False},
        {"manager_factory": functools.partial(KVCacheManager, prefix_index="radix")},
        {"schedule": "longest_prefix"},
    ],
    ids=["no-device-prefix-cache", "radix-index", "longest-prefix-first"],
)
def test_tiers_work_with_every_prefix_index_and_schedule(engine_args):
    prompts = PROMPTS * 2
    store = TieredStore([HostTier(1 << 22)])
    Engine(model(), num_blocks=64, block_size=BLOCK, store=store, **engine_args).generate(
        prompts[:1], 2
    )
    engine = Engine(model(), num_blocks=14, block_size=BLOCK, max_running=4, store=store,
                    **engine_args)  # fmt: skip
    assert [c.token_ids for c in engine.generate(prompts, 12)] == reference_tokens(prompts, 12)
    assert store.metrics.snapshot().hits["host"] > 0


# -- acceptance tests 2, 3, 7 (disk) and 9 -----------------------------------------------


def prompt_blobs(prompt: list[int]) -> list[tuple[str, str]]:
    """The real blocks of `prompt`, as the engine stores them (key, blob hex)."""
    store = TieredStore([HostTier(1 << 22)], metrics=None)
    Engine(model(), num_blocks=64, block_size=BLOCK, store=store).generate([prompt], 1)
    host = store.tier("host")
    keys = host.stored_keys()
    return [(k, b.hex()) for k, b in zip(keys, host.get_many(keys), strict=True)]


def test_acceptance_2_disk_survives_sigkill_at_random_points(tmp_path):
    prompt = system_prompt(160) + question("Where is the reading room?")
    blobs_file = tmp_path / "blobs.json"
    blobs_file.write_text(json.dumps(prompt_blobs(prompt)))
    root = tmp_path / "kv"
    rng = random.Random(0)
    torn = 0
    for kill in range(24):
        writer = subprocess.Popen(
            [sys.executable, str(DISK_WRITER), str(root), str(blobs_file), str(kill)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert writer.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.005, 0.06))
        finally:
            writer.send_signal(signal.SIGKILL)
            writer.wait(10)
        assert writer.returncode == -signal.SIGKILL
        torn += len(list(root.rglob("*.tmp")))
        restarted = DiskTier(root)  # what a restarted engine does first
        assert not list(root.rglob("*.tmp")), "temporary files are removed at start"
        assert restarted.recovery["quarantined"] == 0, "a visible file is always whole"
        for key in restarted.stored_keys():
            (blob,) = restarted.get_many([key])
            decode_blob(blob, fingerprint=None, block_hash=bytes.fromhex(key.split(":")[2]))
    assert torn >= 5, f"only {torn} kills landed mid-write; the test lost its teeth"
    store = TieredStore([DiskTier(root)])
    engine = Engine(model(), num_blocks=64, block_size=BLOCK, store=store)
    assert engine.generate([prompt], 8)[0].token_ids == reference_tokens([prompt], 8)[0]
    store.close()


def test_acceptance_3_a_new_process_on_the_same_directory_computes_only_the_tail(tmp_path):
    prompt = system_prompt(150) + question("How late is it open?")
    want = reference_tokens([prompt], 8)
    args = ["--prompts", json.dumps([prompt]), "--disk", str(tmp_path)]
    first = run_worker(*args)
    assert first["tokens"] == want and first["computed"] == len(prompt) and first["flushed"]
    second = run_worker(*args)
    tail = len(prompt) - (len(prompt) - 1) // BLOCK * BLOCK
    assert second["tokens"] == want
    assert second["computed"] == tail, "only the partial last block is computed"
    assert second["hits"]["disk"] == len(prompt) - tail
    # The first process stored every full block it computed: the prompt's and the output's
    # (the last sampled token is never computed).
    assert second["recovery"]["blocks"] == (len(prompt) + 8 - 1) // BLOCK


def test_acceptance_7_on_disk_a_flipped_bit_is_counted_deleted_and_recomputed(tmp_path):
    prompt = system_prompt(128) + question("Fees?")
    store = TieredStore([DiskTier(tmp_path)])
    Engine(model(), num_blocks=64, block_size=BLOCK, store=store).generate([prompt], 1)
    assert store.flush()
    store.close()
    disk = DiskTier(tmp_path)
    space = KeySpace("paged_kv", fingerprint_model(model(), BLOCK))
    hashes = block_hashes(prompt, BLOCK)
    path = disk.path_of(space.key(hashes[3]))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x04
    path.write_bytes(bytes(data))
    store = TieredStore([disk])
    engine = Engine(model(), num_blocks=64, block_size=BLOCK, store=store)
    assert engine.generate([prompt], 8)[0].token_ids == reference_tokens([prompt], 8)[0]
    assert store.metrics.snapshot().hits["disk"] == 3 * BLOCK
    assert disk.stats().corrupt == 1 and disk.stats().count("delete", "ok") == 1
    assert engine.stats().prefill_tokens_computed == len(prompt) - 3 * BLOCK
    assert store.flush()  # the recomputed block was stored again, whole this time
    decode_blob(path.read_bytes(), fingerprint=space.fingerprint_digest, block_hash=hashes[3])
    store.close()


def test_acceptance_9_metrics_hits_within_queries_and_sources_add_up(tmp_path):
    prompts = [system_prompt(80) + question(f"question number {i}?") for i in range(10)]
    store = TieredStore([HostTier(40 * 8448), DiskTier(tmp_path)])
    engine = Engine(model(), num_blocks=10, block_size=BLOCK, max_running=3, store=store)
    admitted = 0
    for p in prompts:
        engine.add_request(p, SamplingParams(20))
    while engine.has_unfinished():
        plan = engine.step()
        admitted += sum(c.start + c.num_tokens for c in plan.chunks if c.admitted)
    assert engine.stats().preemptions, "recomputed prompts count again, as admitted tokens"
    snap = store.metrics.snapshot()
    assert snap.queries == admitted
    assert sum(snap.hits.values()) <= snap.queries
    assert sum(snap.prompt_tokens.values()) == snap.queries
    assert snap.prompt_tokens["computed"] == engine.stats().prefill_tokens_computed
    families = {f.name: f for f in text_string_to_metric_families(engine.metrics_text())}
    for name in (
        "paged_kv_prefix_cache_queries",
        "paged_kv_prefix_cache_hits",
        "paged_kv_prompt_tokens",
        "paged_kv_tier_operations",
        "paged_kv_tier_operation_duration_seconds",
        "paged_kv_tier_bytes",
        "paged_kv_tier_evictions",
        "paged_kv_tier_corrupt_blocks",
        "paged_kv_tier_blocks",
        "paged_kv_tier_used_bytes",
        "paged_kv_tier_up",
        "paged_kv_tier_write_queue_blocks",
    ):
        assert name in families, name
    store.flush()
    with store.metrics.serve() as server:  # a real scraper over HTTP on 127.0.0.1
        assert server.host == "127.0.0.1"
        with urllib.request.urlopen(server.url, timeout=5) as response:
            text = response.read().decode()
    scraped = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert scraped[("paged_kv_prefix_cache_queries_total", ())] == admitted
    assert scraped[("paged_kv_tier_up", (("tier", "disk"),))] == 1
    assert scraped[("paged_kv_tier_blocks", (("tier", "disk"),))] == store.tier("disk").usage()[0]
    store.close()
