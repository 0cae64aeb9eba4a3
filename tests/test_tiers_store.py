"""The tiered store (paged_kv/tiers/store.py) under hostile input and faults: arguments refused
before any side effect, close() with one deadline that really stops the writers, writes
flushed (or counted as lost) at interpreter exit, authenticated blobs, blobs of a foreign
layout, and a state machine mixing valid and invalid calls."""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import zlib
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from test_tiers_base import TOY_FP, toy_blobs
from test_tiers_codec import toy_payloads

from paged_kv.cache.hashing import block_hashes
from paged_kv.errors import InvalidArgument, PagedKVError
from paged_kv.tiers import (
    DiskTier,
    HostTier,
    KeySpace,
    ModelFingerprint,
    TieredStore,
    encode_blob,
)
from paged_kv.tiers.base import Recorder, Tier
from paged_kv.tiers.store import SECRET_ENV

FP = ModelFingerprint("toy", "ab" * 32, "float32", 1, 1, 2, 2)  # 8 floats: 32 bytes a block
SPACE = KeySpace("store", FP)
SECRET = b"the deployment's secret, 32 B!!!"
ROOT = Path(__file__).resolve().parent.parent


def chain(n: int, start: int = 0) -> list[bytes]:
    return block_hashes(list(range(start, start + 2 * n)), 2)


def payload_of(block_hash: bytes) -> bytes:
    return hashlib.sha256(block_hash).digest()  # 32 bytes, determined by the block


def blob_for(block_hash: bytes, **change) -> bytes:
    args = dict(
        dtype=FP.dtype,
        shape=FP.payload_shape,
        fingerprint=SPACE.fingerprint_digest,
        block_hash=block_hash,
    )
    payload = change.pop("payload", payload_of(block_hash))
    args.update(change)
    return encode_blob(payload, **args)


# -- arguments refused before any side effect ----------------------------------------------


@pytest.mark.parametrize(
    "tiers",
    [["host"], "host", None, [HostTier(100), object()], HostTier(100)],
    ids=["names", "str", "none", "an-object", "a-bare-tier"],
)
def test_a_store_refuses_what_is_not_a_list_of_tiers(tiers):
    with pytest.raises(InvalidArgument, match=r"(?i)tier"):
        TieredStore(tiers, metrics=None)


def test_the_same_tier_twice_is_refused():
    host = HostTier(100)
    with pytest.raises(InvalidArgument, match="distinct"):
        TieredStore([host, host], metrics=None)


@pytest.mark.parametrize(
    "args",
    [
        {"queue_blocks": 0},
        {"queue_blocks": -1},
        {"queue_blocks": 1.5},
        {"batch_blocks": 0},
        {"namespace": ".."},
        {"metrics": "yes"},
        {"secret": b"short"},
        {"secret": 12345678901234567890},
        {"secret": "\udcff" * 32},  # lone surrogates: a str with no UTF-8 bytes
    ],
    ids=repr,
)
def test_a_refused_store_leaves_its_tiers_as_they_were(tmp_path, args):
    disk = DiskTier(tmp_path, fsync=False)
    live = TieredStore([disk], metrics=True)
    try:
        recorder = disk.recorder
        threads = threading.active_count()
        with pytest.raises(InvalidArgument):
            TieredStore([HostTier(100), disk], **args)
        with pytest.raises(InvalidArgument):
            TieredStore([HostTier(100)], **args)  # no lower tier: still checked
        assert disk.recorder is recorder, "the live store's recorder was rebound"
        assert threading.active_count() == threads, "a writer thread was started"
    finally:
        live.close()


@pytest.mark.parametrize("timeout", [-1, math.inf, math.nan, "1", None], ids=repr)
def test_flush_and_close_take_a_finite_timeout(timeout):
    store = TieredStore([HostTier(100)], metrics=None)
    with pytest.raises(InvalidArgument, match="timeout_s"):
        store.flush(timeout)
    with pytest.raises(InvalidArgument, match="timeout_s"):
        store.close(timeout)
    assert store.close(0)


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.save("not a space", chain(1), [payload_of(chain(1)[0])]),
        lambda s: s.save(SPACE, None, []),
        lambda s: s.save(SPACE, chain(2), b"two payloads"),
        lambda s: s.save(SPACE, chain(2), [payload_of(h) for h in chain(1)]),
        lambda s: s.save(SPACE, [*chain(1), b"short"], [payload_of(h) for h in chain(2)]),
        lambda s: s.save(SPACE, chain(2), [payload_of(chain(1)[0]), "text"]),
        lambda s: s.save(SPACE, chain(2), [payload_of(chain(1)[0]), b"wrong size"]),
        lambda s: s.load_run(None, chain(1)),
        lambda s: s.load_run(SPACE, [b"x" * 31]),
        lambda s: s.count_run(FP, chain(1)),
    ],
    ids=[
        "space-str",
        "hashes-none",
        "payloads-bytes",
        "one-payload-short",
        "a-short-hash",
        "a-str-payload",
        "a-wrong-size",
        "load-space-none",
        "load-short-hash",
        "count-a-fingerprint",
    ],
)
def test_a_bad_call_is_a_typed_error_that_stores_nothing(tmp_path, call):
    host, disk = HostTier(1 << 20), DiskTier(tmp_path, fsync=False)
    store = TieredStore([host, disk], metrics=None)
    store.save(SPACE, chain(1, start=100), [payload_of(h) for h in chain(1, start=100)])
    assert store.flush(10)
    before = (host.stored_keys(), disk.stored_keys(), host.stats(), disk.stats())
    with pytest.raises(InvalidArgument):
        call(store)
    assert store.flush(10)
    assert (host.stored_keys(), disk.stored_keys(), host.stats(), disk.stats()) == before
    store.close()


# -- close ---------------------------------------------------------------------------------


class GateTier(Tier):
    """A "disk" tier whose writes wait at a gate; it logs every call and when it began."""

    def __init__(self) -> None:
        super().__init__("disk")
        self.gate = threading.Event()
        self.calls: list[tuple[float, list[str]]] = []
        self.data: dict[str, bytes] = {}

    def count_leading(self, keys):
        n = 0
        while n < len(keys) and keys[n] in self.data:
            n += 1
        return n

    def get_many(self, keys, max_bytes=None):
        return [self.data.get(k) for k in keys]

    def put_many(self, items):
        self.calls.append((time.monotonic(), [k for k, _ in items]))
        self.gate.wait(30)
        self.data.update(items)
        return [True] * len(items)

    def delete(self, keys):
        return sum(self.data.pop(k, None) is not None for k in keys)

    def usage(self):
        return len(self.data), None


def save_blocks(store: TieredStore, n: int) -> list[bytes]:
    hashes = chain(n)
    store.save(SPACE, hashes, [payload_of(h) for h in hashes])
    return hashes


def test_close_keeps_one_deadline_and_no_writer_starts_a_call_after_it():
    tier = GateTier()
    store = TieredStore([tier], batch_blocks=1)
    save_blocks(store, 6)
    waited = time.monotonic() + 10
    while not tier.calls:  # the first batch is in the tier, stuck at the gate
        assert time.monotonic() < waited, "the writer never began a batch"
        time.sleep(0.01)
    assert store.queue_depths() == {"disk": 6}, "5 queued and 1 being written"
    gauge = "paged_kv_tier_write_queue_blocks"
    assert store.metrics.value(gauge, tier="disk") == 6, "the gauge as the save left it"
    began = time.monotonic()
    assert store.close(timeout_s=1.0) is False, "a stuck write is not a clean close"
    returned = time.monotonic()
    assert returned - began < 1.0 + 2.0, "close waited past its deadline (once, not twice)"
    tier.gate.set()
    (writer,) = store._writers
    writer.join(10)
    assert not writer.is_alive(), "the writer ended after the batch it was in"
    assert len(tier.calls) == 1 and all(t < returned for t, _ in tier.calls)
    assert tier.stats().count("put", "dropped") == 5
    assert store.queue_depths() == {"disk": 0} and store.metrics.value(gauge, tier="disk") == 0


def test_close_finishes_the_queue_and_stops_every_writer(tmp_path):
    disk = DiskTier(tmp_path, fsync=False)
    store = TieredStore([HostTier(1 << 20), disk], metrics=None)
    hashes = save_blocks(store, 40)
    assert store.close(10) is True
    assert sorted(disk.stored_keys()) == sorted(SPACE.keys(hashes))
    assert not any(w.is_alive() for w in store._writers)
    for call in (
        lambda: store.save(SPACE, hashes, [payload_of(h) for h in hashes]),
        lambda: store.load_run(SPACE, hashes),
        lambda: store.count_run(SPACE, hashes),
    ):
        with pytest.raises(PagedKVError, match="closed"):
            call()
    assert store.close() is True, "closing twice is harmless"


EXIT_SCRIPT = textwrap.dedent(
    """
    import sys, threading
    from paged_kv.cache.hashing import block_hashes
    from paged_kv.tiers import DiskTier, KeySpace, ModelFingerprint, TieredStore
    from paged_kv.tiers import store as store_module
    from paged_kv.tiers.base import Tier

    class Stuck(Tier):
        def __init__(self):
            super().__init__("remote")
        def count_leading(self, keys): return 0
        def get_many(self, keys, max_bytes=None): return [None] * len(keys)
        def put_many(self, items):
            threading.Event().wait()  # never returns
        def delete(self, keys): return 0
        def usage(self): return 0, 0

    store_module.EXIT_FLUSH_S = float(sys.argv[3])
    fp = ModelFingerprint("toy", "ab" * 32, "float32", 1, 1, 2, 2)
    tiers = [DiskTier(sys.argv[1], fsync=False)] + ([Stuck()] if sys.argv[2] == "stuck" else [])
    store = TieredStore(tiers, queue_blocks=4096, metrics=None)
    hashes = block_hashes(list(range(2 * int(sys.argv[4]))), 2)
    store.save(store.key_space(fp), hashes, [bytes(32)] * len(hashes))
    print("queued", flush=True)
    """
)


def run_exit_script(
    tmp_path: Path, mode: str, bound: float, blocks: int
) -> subprocess.CompletedProcess:
    script = tmp_path / "exit_script.py"
    script.write_text(EXIT_SCRIPT)
    return subprocess.run(
        [sys.executable, str(script), str(tmp_path / "kv"), mode, str(bound), str(blocks)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_queued_writes_of_an_unclosed_store_reach_disk_at_exit(tmp_path):
    done = run_exit_script(tmp_path, "disk", 60.0, 2000)
    assert done.returncode == 0 and "queued" in done.stdout, done.stderr
    assert "lost" not in done.stderr
    assert DiskTier(tmp_path / "kv").recovery["blocks"] == 2000


def test_writes_an_exit_cannot_finish_are_counted_in_a_warning(tmp_path):
    done = run_exit_script(tmp_path, "stuck", 6.0, 100)  # 6 s: the disk's 100 writes, loaded
    assert done.returncode == 0, done.stderr
    assert "RuntimeWarning" in done.stderr and "were lost at exit" in done.stderr
    # The stuck remote writer holds one batch of 64 and 36 more queued: 100 in all.
    assert "100 queued block writes" in done.stderr and "(100 to the remote tier)" in done.stderr
    assert DiskTier(tmp_path / "kv").recovery["blocks"] == 100, "the disk tier still flushed"


# -- authenticated blobs and foreign layouts -----------------------------------------------


def test_with_a_secret_a_forged_blob_is_refused_counted_and_deleted():
    host = HostTier(1 << 20)
    store = TieredStore([host], secret=SECRET)
    assert store.authenticated
    hashes = save_blocks(store, 3)
    assert [bytes(b.payload) for b in store.load_run(SPACE, hashes)] == [
        payload_of(h) for h in hashes
    ]
    evil = b"\xee" * 32
    forgeries = {
        "unauthenticated": blob_for(hashes[1], payload=evil),  # CRC, fingerprint, hash: right
        "authentication": blob_for(
            hashes[1], payload=evil, secret=b"a guessed secret, 32 bytes!!!!!!"
        ),
    }
    for reason, forged in forgeries.items():
        host.delete([SPACE.key(hashes[1])])
        host.put_many([(SPACE.key(hashes[1]), forged)])
        loaded = store.load_run(SPACE, hashes)
        assert [b.block_hash for b in loaded] == hashes[:1], "the run stops at the forgery"
        assert host.count_leading([SPACE.key(hashes[1])]) == 0, "the forgery was deleted"
        assert (
            store.metrics.value("paged_kv_tier_corrupt_blocks_total", tier="host", reason=reason)
            == 1
        )
    assert host.stats().corrupt == 2


def test_the_secret_comes_from_the_environment_and_readers_without_it_miss(monkeypatch):
    host = HostTier(1 << 20)
    monkeypatch.setenv(SECRET_ENV, SECRET.decode())
    writer = TieredStore([host], metrics=None)
    hashes = save_blocks(writer, 2)
    assert len(TieredStore([host], metrics=None, secret=SECRET).load_run(SPACE, hashes)) == 2
    monkeypatch.delenv(SECRET_ENV)
    plain = TieredStore([host])
    assert plain.load_run(SPACE, hashes) == []
    assert (
        plain.metrics.value(
            "paged_kv_tier_corrupt_blocks_total", tier="host", reason="authenticated"
        )
        == 1
    )
    monkeypatch.setenv(SECRET_ENV, "too short")
    with pytest.raises(InvalidArgument, match=SECRET_ENV):
        TieredStore([HostTier(100)], metrics=None)
    monkeypatch.setenv(SECRET_ENV, "")  # set but empty: refused, not read as unset
    with pytest.raises(InvalidArgument, match=rf"^\${SECRET_ENV} is set but empty.*unset it"):
        TieredStore([HostTier(100)], metrics=None)


@pytest.mark.skipif(os.name != "posix", reason="os.environb is POSIX only")
def test_a_secret_that_is_not_utf_8_text_is_refused_saying_what_a_secret_must_be(monkeypatch):
    monkeypatch.setitem(os.environb, SECRET_ENV.encode(), b"\xff\xfe" + b"s" * 30)
    text = r"text must be valid UTF-8 text.*secrets\.token_hex\(32\).*or pass the raw bytes"
    with pytest.raises(InvalidArgument, match=rf"^\${SECRET_ENV}: a secret given as {text}"):
        TieredStore([HostTier(100)], metrics=None)
    with pytest.raises(InvalidArgument, match=rf"^secret=: a secret given as {text}"):
        TieredStore([HostTier(100)], metrics=None, secret="\udcff" * 32)
    raw = TieredStore([HostTier(100)], metrics=None, secret=b"\xff\xfe" + b"s" * 30)
    assert raw.authenticated  # the same bytes, given as bytes, are a fine secret


def test_without_prometheus_client_metrics_are_off_unless_asked_for(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import prometheus_client fails
    monkeypatch.delitem(sys.modules, "paged_kv.tiers.metrics", raising=False)  # imported afresh
    with pytest.raises(PagedKVError, match=r"pip install 'paged_kv\[tiers\]'"):
        TieredStore([HostTier(100)], metrics=True)
    store = TieredStore([HostTier(1 << 20), DiskTier(tmp_path, fsync=False)])  # "auto"
    assert store.metrics is None
    hashes = save_blocks(store, 3)
    assert store.flush(10.0) and store.close()
    disk_only = TieredStore([DiskTier(tmp_path, fsync=False)])
    assert disk_only.metrics is None
    assert len(disk_only.load_run(SPACE, hashes)) == 3  # the tiers work without the extra
    disk_only.close()


def test_with_prometheus_client_the_default_store_keeps_metrics():
    from paged_kv.tiers.metrics import TierMetrics

    assert isinstance(TieredStore([HostTier(100)]).metrics, TierMetrics)


def version_1(blob: bytes) -> bytes:
    old = bytearray(blob)
    struct.pack_into("<H", old, 4, 1)
    struct.pack_into("<I", old, 108, zlib.crc32(old[:108]))
    return bytes(old)


def test_a_blob_of_the_old_format_reads_as_a_miss():
    host = HostTier(1 << 20)
    store = TieredStore([host])
    hashes = chain(2)
    host.put_many([(SPACE.key(h), version_1(blob_for(h))) for h in hashes])
    assert store.load_run(SPACE, hashes) == []
    assert (
        store.metrics.value("paged_kv_tier_corrupt_blocks_total", tier="host", reason="version")
        == 1
    )


@pytest.mark.parametrize(
    "change",
    [
        {"dtype": "int32"},  # same size, another dtype
        {"dtype": "float16", "payload": bytes(16)},
        {"shape": (1, 2, 1, 2, 2)},  # same size, another shape
        {"shape": (1, 2, 2, 1, 1), "payload": bytes(16)},
    ],
    ids=["int32", "float16", "reshaped", "smaller"],
)
def test_a_blob_of_another_layout_under_the_right_fingerprint_and_hash_is_refused(change):
    host = HostTier(1 << 20)
    store = TieredStore([host])
    hashes = chain(2)
    host.put_many([(SPACE.key(hashes[0]), blob_for(hashes[0], **change))])
    host.put_many([(SPACE.key(hashes[1]), blob_for(hashes[1]))])
    assert store.load_run(SPACE, hashes) == []
    assert host.count_leading([SPACE.key(hashes[0])]) == 0
    assert (
        store.metrics.value(
            "paged_kv_tier_corrupt_blocks_total", tier="host", reason="foreign layout"
        )
        == 1
    )


# -- a state machine over the store's public calls ------------------------------------------

RUNS = [chain(4, start=1000 * i) for i in range(3)]
BAD_SAVES = [
    lambda s, h: s.save(SPACE, h, [payload_of(x) for x in h[:-1]]),
    lambda s, h: s.save(SPACE, [*h[:-1], h[-1][:31]], [payload_of(x) for x in h]),
    lambda s, h: s.save(SPACE, h, [payload_of(x) for x in h[:-1]] + [b"\0" * 31]),
    lambda s, h: s.save(SPACE, h, [payload_of(x) for x in h[:-1]] + [None]),
    lambda s, h: s.save(FP, h, [payload_of(x) for x in h]),
    lambda s, h: s.load_run(SPACE, [*h[:-1], "a str"]),
    lambda s, h: s.count_run(None, h),
    lambda s, h: s.tier("gpu"),
    lambda s, h: s.flush(-1),
]


class StoreMachine(RuleBasedStateMachine):
    """Valid saves and loads against a model of what was saved; invalid calls of every kind
    between them. After each typed error, nothing observable has changed."""

    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="paged_kv_store_machine_")
        self.host, self.disk = HostTier(1 << 20), DiskTier(self.root, fsync=False)
        self.store = TieredStore([self.host, self.disk], metrics=None, batch_blocks=3)
        self.saved: set[bytes] = set()

    def observable(self) -> tuple:
        assert self.store.flush(10)
        return (
            sorted(self.host.stored_keys()),
            sorted(self.disk.stored_keys()),
            self.host.stats(),
            self.disk.stats(),
            self.store.queue_depths(),
        )

    @rule(run=st.sampled_from(range(len(RUNS))), n=st.integers(1, 4))
    def save(self, run: int, n: int) -> None:
        hashes = RUNS[run][:n]
        self.store.save(SPACE, hashes, [payload_of(h) for h in hashes])
        self.saved.update(hashes)

    @rule(run=st.sampled_from(range(len(RUNS))), start=st.integers(0, 3))
    def load(self, run: int, start: int) -> None:
        hashes = RUNS[run][start:]
        want = 0
        while want < len(hashes) and hashes[want] in self.saved:
            want += 1
        loaded = self.store.load_run(SPACE, hashes)
        assert [b.block_hash for b in loaded] == hashes[:want]
        assert all(bytes(b.payload) == payload_of(b.block_hash) for b in loaded)
        assert self.store.count_run(SPACE, hashes) == want

    @rule(bad=st.sampled_from(BAD_SAVES), run=st.sampled_from(range(len(RUNS))))
    def bad_call(self, bad, run: int) -> None:
        before = self.observable()
        with pytest.raises(InvalidArgument):
            bad(self.store, RUNS[run])
        assert self.observable() == before

    @precondition(lambda self: self.saved)
    @rule()
    def flush(self) -> None:
        assert self.store.flush(10)
        assert sorted(self.disk.stored_keys()) == sorted(SPACE.keys(list(self.saved)))

    @invariant()
    def host_holds_what_was_saved(self) -> None:
        assert sorted(self.host.stored_keys()) == sorted(SPACE.keys(list(self.saved)))

    def teardown(self) -> None:
        assert self.store.close(10)
        shutil.rmtree(self.root, ignore_errors=True)


TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = settings(max_examples=25, stateful_step_count=20, deadline=None)


class CountingRecorder(Recorder):
    def __init__(self) -> None:
        self.ops: list[tuple[str, str, str, int]] = []

    def op(self, tier, op, result, count=1, seconds=None):
        self.ops.append((tier, op, result, count))


def test_a_recorder_passed_as_metrics_gets_the_tiers_reports():
    recorder = CountingRecorder()
    store = TieredStore([HostTier(1 << 20)], metrics=recorder)
    save_blocks(store, 2)
    assert ("host", "put", "ok", 2) in recorder.ops


def test_an_engine_on_an_authenticated_store_serves_its_own_blocks():
    from tiers_helpers import BLOCK, model, question, reference_tokens, system_prompt

    from paged_kv.serving.engine import Engine
    from paged_kv.tiers import fingerprint_model

    prompt = system_prompt(64) + question("Who may write here?")
    host = HostTier(1 << 22)
    store = TieredStore([host], secret=SECRET)
    for _ in range(2):  # the second engine's device pool is empty: its hits come from host
        engine = Engine(model(), num_blocks=64, block_size=BLOCK, store=store)
        assert engine.generate([prompt], 4)[0].token_ids == reference_tokens([prompt], 4)[0]
    loadable = (len(prompt) - 1) // BLOCK * BLOCK
    assert store.metrics.snapshot().hits["host"] == loadable and host.stats().corrupt == 0
    (key, *_) = host.stored_keys()
    payload = fingerprint_model(model(), BLOCK).payload_bytes
    assert len(host.get_many([key])[0]) == 112 + payload + 32, "every blob carries its tag"


# Behaviours that mutation testing (tools/mutation_test.py) found no test pinning, in the tiers:
# each test here kills at least one mutant that survived every other test of its module.


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


def test_a_block_offered_again_while_its_write_is_pending_is_written_once():
    tier = SlowTier()
    store = TieredStore([tier], metrics=None)
    space = store.key_space(TOY_FP)
    hashes = block_hashes(list(range(4)), 2)
    try:
        for _ in range(3):
            store.save(space, hashes, toy_payloads(2))
        assert store.queue_depths()["disk"] == 2  # not 6
        tier.release.set()
        assert store.flush(10)
        assert sorted(tier.written) == sorted(space.keys(hashes))
    finally:
        tier.release.set()
        store.close()


def test_a_store_reports_what_its_tiers_hold_from_the_start(tmp_path):
    """A warm disk tier (a restart) shows its blocks in the metrics before any call."""
    DiskTier(tmp_path, fsync=False).put_many(toy_blobs(3))
    store = TieredStore([DiskTier(tmp_path, fsync=False)], metrics=True)
    try:
        assert store.metrics.value("paged_kv_tier_blocks", tier="disk") == 3
        assert store.metrics.value("paged_kv_tier_used_bytes", tier="disk") == sum(
            len(b) for _, b in toy_blobs(3)
        )
    finally:
        store.close()
