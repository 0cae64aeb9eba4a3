"""The tiered store: host memory, disk and Redis chained below the device pool.

Read path: `load_run` finds the longest run of a prompt's blocks present across the tiers
(fastest tier first, a block from whichever tier has it), fetches it, verifies every blob,
and stops at the first block that is missing or bad; a bad blob is counted, deleted and
treated as a miss. Blocks found below the host tier are copied up into it.

Write path: `save` encodes each full block once; the host tier stores it synchronously
(write-through); disk and Redis get it through one bounded background queue each, which
drops work when full. A dropped write is a future miss, never a wrong hit.

Closing: `close(timeout_s)` has one deadline for finishing the queues and stopping the
writers; what is still queued then is dropped (and counted), and no writer starts a tier call
after `close` returns. A store never closed is flushed at interpreter exit for at most
`EXIT_FLUSH_S` seconds, and a warning says how many writes were lost.

Authentication (opt-in): with a deployment secret (`secret=`, or `$PAGED_KV_BLOB_SECRET`)
every blob is written with an HMAC-SHA256 tag and every blob read must carry a valid one; a
forged blob is counted as corrupt ("unauthenticated", "authentication") and deleted. Needed
when others can write to a shared tier (a Redis many services reach); every process sharing
a namespace must then use the same secret. A secret given as text (a str, or the environment
variable) is its UTF-8 bytes; text that has none (a non-UTF-8 environment value, lone
surrogates) is refused with `InvalidArgument`.

Metrics: by default (`metrics="auto"`) a store keeps Prometheus metrics when prometheus_client
(the `tiers` extra) is installed and none otherwise, so host and disk tiers need no extra;
`metrics=True` insists, and without prometheus_client is a `PagedKVError` naming the extra.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import warnings
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from paged_kv.errors import CorruptBlock, InvalidArgument, PagedKVError
from paged_kv.tiers.base import NULL_RECORDER, Key, Recorder, Tier, TierStats
from paged_kv.tiers.codec import (
    MIN_SECRET_BYTES,
    BlobHeader,
    KeySpace,
    check_namespace,
    check_secret,
    decode_blob,
    encode_blob,
)
from paged_kv.validation import require_positive_int, require_seconds

SECRET_ENV = "PAGED_KV_BLOB_SECRET"
EXIT_FLUSH_S = 10.0  # how long interpreter exit waits for the writes of unclosed stores


@dataclass(frozen=True)
class LoadedBlock:
    """A verified block from a tier: where it came from, its blob and the payload in it."""

    tier: str
    block_hash: bytes
    blob: bytes
    header: BlobHeader
    payload: memoryview


def longest_run(keys: Sequence[Key], tiers: Sequence[Tier]) -> list[Tier]:
    """The tier to read each block of the longest run of `keys` present in some tier,
    starting at the first key: ask the tiers in order (fastest first) how many of the
    remaining keys they hold from the front; take the first tier that has at least one,
    and go on after them. Stop when no tier has the next key: the first gap ends the run,
    even if later keys are present (without block i, blocks after it are useless).
    """
    sources: list[Tier] = []
    while len(sources) < len(keys):
        rest = keys[len(sources) :]
        for tier in tiers:
            n = tier.count_leading(rest)
            if n:
                sources += [tier] * n
                break
        else:
            break  # no tier has the next block
    return sources


class TieredStore:
    """`tiers` in the order to consult them (fastest first, e.g. host, disk, remote).

    The host tier, if any, is written synchronously; every other tier through its own
    background queue of at most `queue_blocks` blocks, written in batches of up to
    `batch_blocks` (one pipeline or one directory sync per batch). `metrics`: "auto" (a
    Prometheus `TierMetrics` with its own registry if prometheus_client is installed, else
    none), True (a `TierMetrics`, or `PagedKVError` naming the extra without it), a `Recorder`
    such as a `TierMetrics` to share, or None for none.
    """

    def __init__(
        self,
        tiers: Sequence[Tier],
        *,
        namespace: str = "paged_kv",
        queue_blocks: int = 1024,
        batch_blocks: int = 64,
        metrics: object = "auto",
        secret: bytes | str | None = None,
    ) -> None:
        # Every argument is checked before anything changes (no recorder rebound, no thread).
        self.tiers = _check_tiers(tiers)
        self.namespace = check_namespace(namespace)
        queue_blocks = require_positive_int("queue_blocks", queue_blocks)
        batch_blocks = require_positive_int("batch_blocks", batch_blocks)
        if not (
            metrics is True
            or metrics is None
            or (isinstance(metrics, str) and metrics == "auto")
            or isinstance(metrics, Recorder)
        ):
            raise InvalidArgument(
                f"metrics= is 'auto' (a new TierMetrics if prometheus_client is installed), "
                f"True (a new TierMetrics), None, or a Recorder such as a TierMetrics to share; "
                f"got {metrics!r}."
            )
        self._secret = _deployment_secret(secret)
        if metrics is True or metrics == "auto":
            metrics = _new_metrics(required=metrics is True)
        self.metrics = metrics
        recorder: Recorder = metrics if isinstance(metrics, Recorder) else NULL_RECORDER
        self.recorder = recorder
        for tier in self.tiers:
            tier.recorder = recorder
            recorder.up(tier.name, tier.is_up)
            tier.report_usage()
        self.host = next((t for t in self.tiers if t.name == "host"), None)
        self._closed = False
        self._writers = [
            _Writer(t, queue_blocks, batch_blocks) for t in self.tiers if t is not self.host
        ]
        for writer in self._writers:
            writer.start()

    @property
    def authenticated(self) -> bool:
        """Are blobs written with, and read only with, an HMAC tag (a secret is set)?"""
        return self._secret is not None

    def tier(self, name: str) -> Tier:
        for tier in self.tiers:
            if tier.name == name:
                return tier
        raise InvalidArgument(f"this store has no {name!r} tier; it has {self.tier_names}.")

    @property
    def tier_names(self) -> list[str]:
        return [t.name for t in self.tiers]

    def key_space(self, fingerprint: object) -> KeySpace:
        """The keys of one model's blocks in this store's namespace."""
        # KeySpace refuses anything but a ModelFingerprint with a typed error, so the argument
        # stays `object` here and the refusal has one place
        return KeySpace(self.namespace, fingerprint)  # type: ignore[arg-type]

    def _open(self, space: object) -> KeySpace:
        if self._closed:
            raise PagedKVError("this store is closed; make a new TieredStore to use its tiers.")
        if not isinstance(space, KeySpace):
            raise InvalidArgument(
                f"pass the KeySpace of the model's blocks (store.key_space(fingerprint)), got "
                f"{type(space).__name__}."
            )
        return space

    # -- read path -------------------------------------------------------------------------

    def count_run(self, space: KeySpace, block_hashes: Sequence[bytes]) -> int:
        """How many leading blocks some tier holds (presence only, nothing verified)."""
        return len(longest_run(self._open(space).keys(block_hashes), self.tiers))

    def load_run(self, space: KeySpace, block_hashes: Sequence[bytes]) -> list[LoadedBlock]:
        """The verified blocks of the longest run of `block_hashes` found in the tiers.

        Stops at the first block missing everywhere, vanished since the lookup, or failing
        verification (which is counted as corrupt on its tier and deleted there)."""
        keys = self._open(space).keys(block_hashes)
        sources = longest_run(keys, self.tiers)
        fingerprint = space.fingerprint_digest
        want_dtype, want_shape = space.fingerprint.dtype, space.fingerprint.payload_shape
        loaded: list[LoadedBlock] = []
        i = 0
        while i < len(sources):
            tier, j = sources[i], i
            while j < len(sources) and sources[j] is tier:
                j += 1
            blobs = tier.get_many(keys[i:j], max_bytes=space.fingerprint.max_blob_bytes)
            for k, blob in zip(range(i, j), blobs, strict=True):
                if blob is None:
                    return self._promote(loaded, keys)
                try:
                    header, payload = decode_blob(
                        blob,
                        fingerprint=fingerprint,
                        block_hash=block_hashes[k],
                        secret=self._secret,
                    )
                    if header.dtype != want_dtype or header.shape != want_shape:
                        raise CorruptBlock(
                            f"a {header.dtype} {header.shape} block where the fingerprint "
                            f"says {want_dtype} {want_shape}",
                            reason="foreign layout",
                        )
                except CorruptBlock as err:
                    tier.record_corrupt(err.reason)
                    tier.delete([keys[k]])
                    return self._promote(loaded, keys)
                loaded.append(LoadedBlock(tier.name, block_hashes[k], blob, header, payload))
            i = j
        return self._promote(loaded, keys)

    def _promote(self, loaded: list[LoadedBlock], keys: Sequence[Key]) -> list[LoadedBlock]:
        """Copy blocks found below the host tier up into it (they were just used)."""
        if self.host is not None:
            lower = [(keys[i], b.blob) for i, b in enumerate(loaded) if b.tier != "host"]
            if lower:
                self.host.put_many(lower)
        return loaded

    # -- write path ------------------------------------------------------------------------

    def save(
        self,
        space: KeySpace,
        block_hashes: Sequence[bytes],
        payloads: Sequence[bytes | memoryview],
    ) -> None:
        """Store full blocks (chain order): the host tier now, the others in the background.
        Every block is checked and encoded before any is stored."""
        self._open(space)
        for name, value in (("block_hashes", block_hashes), ("payloads", payloads)):
            if not isinstance(value, Sequence) or isinstance(value, str | bytes):
                raise InvalidArgument(
                    f"{name} is a list (one entry per block), got {type(value).__name__}."
                )
        if len(block_hashes) != len(payloads):
            raise InvalidArgument(
                f"{len(block_hashes)} block hashes for {len(payloads)} payloads; pass one "
                "payload per block."
            )
        keys = space.keys(block_hashes)
        if not block_hashes or not self.tiers:
            return
        fp = space.fingerprint
        digest = space.fingerprint_digest
        items = [
            (key, encode_blob(p, dtype=fp.dtype, shape=fp.payload_shape, fingerprint=digest,
                              block_hash=h, secret=self._secret))
            for key, h, p in zip(keys, block_hashes, payloads, strict=True)
        ]  # fmt: skip
        if self.host is not None:
            self.host.put_many(items)
        for writer in self._writers:
            writer.offer(items)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait (at most `timeout_s`) until every queued write is done; True if all are."""
        deadline = time.monotonic() + require_seconds("timeout_s", timeout_s, allow_zero=True)
        return all(w.flush(deadline - time.monotonic()) for w in self._writers)

    def close(self, timeout_s: float = 10.0) -> bool:
        """Finish queued writes and stop the writers, all within `timeout_s`; then close the
        tiers. What is still queued at the deadline is dropped (counted as dropped puts). No
        writer starts a tier call after this returns; a call already running in a stuck tier
        can only finish. True if every queued write was done and every writer stopped."""
        deadline = time.monotonic() + require_seconds("timeout_s", timeout_s, allow_zero=True)
        if self._closed:
            return not any(w.is_alive() for w in self._writers)
        self._closed = True
        flushed = all(w.flush(deadline - time.monotonic()) for w in self._writers)
        for writer in self._writers:
            writer.stop()
        for writer in self._writers:
            writer.join(max(0.0, deadline - time.monotonic()))
        for tier in self.tiers:
            tier.close()
        return flushed and not any(w.is_alive() for w in self._writers)

    def __enter__(self) -> TieredStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, TierStats]:
        return {t.name: t.stats() for t in self.tiers}

    def queue_depths(self) -> dict[str, int]:
        return {w.tier.name: w.depth for w in self._writers}

    def __repr__(self) -> str:
        return f"TieredStore({', '.join(map(repr, self.tiers))})"


def _check_tiers(tiers: object) -> list[Tier]:
    if not isinstance(tiers, Sequence) or isinstance(tiers, str | bytes):
        raise InvalidArgument(
            f"a store takes a list of tiers, got {type(tiers).__name__}; e.g. "
            "TieredStore([HostTier(1 << 30), DiskTier('kv-cache/')])."
        )
    listed = list(tiers)
    if not all(isinstance(t, Tier) for t in listed):
        kinds = [type(t).__name__ for t in listed]
        raise InvalidArgument(
            f"a store takes Tier objects (HostTier, DiskTier, RedisTier), got {kinds}."
        )
    names = [t.name for t in listed]
    if len(set(names)) != len(names) or len({id(t) for t in listed}) != len(listed):
        raise InvalidArgument(
            f"a store takes distinct Tier objects, at most one per kind; got {names}."
        )
    return listed


def _new_metrics(*, required: bool) -> Recorder | None:
    """A new `TierMetrics`; without prometheus_client, None, or (`required`) the import's
    `PagedKVError`, which names the extra to install."""
    try:
        from paged_kv.tiers.metrics import TierMetrics
    except PagedKVError:  # prometheus_client is missing (the only error that import raises)
        if required:
            raise
        return None
    return TierMetrics()


def _deployment_secret(secret: bytes | str | None) -> bytes | None:
    """The HMAC key: `secret`, else $PAGED_KV_BLOB_SECRET, else None (no authentication). A
    variable that is set is a secret, checked as one: set but empty is refused, never taken
    for unset (a deployment that blanks it must not silently run unauthenticated)."""
    source = "secret="
    if secret is None:
        secret = os.environ.get(SECRET_ENV)
        source = f"${SECRET_ENV}"
        if secret is None:
            return None
        if not secret:
            raise InvalidArgument(
                f"{source} is set but empty: set it to a secret of at least "
                f"{MIN_SECRET_BYTES} bytes (e.g. secrets.token_hex(32)), or unset it to run "
                "without authentication."
            )
    if isinstance(secret, str):
        try:
            secret = secret.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgument(
                f"{source}: a secret given as text must be valid UTF-8 text, got one with "
                "undecodable bytes or lone surrogates; use e.g. secrets.token_hex(32) (64 "
                "ASCII characters), or pass the raw bytes as secret=."
            ) from None
    try:
        return check_secret(secret)
    except InvalidArgument as err:
        raise InvalidArgument(f"{source}: {err}") from None


class _Writer(threading.Thread):
    """A tier's background writer: a bounded queue, drained in batches by one thread."""

    def __init__(self, tier: Tier, capacity: int, batch: int) -> None:
        super().__init__(name=f"paged_kv-{tier.name}-writer", daemon=True)
        self.tier = tier
        self.capacity = capacity
        self.batch = batch
        self._queue: deque[tuple[Key, bytes]] = deque()
        self._queued: set[Key] = set()  # a block offered twice before it is written: once
        self._busy = 0
        self._stopped = False
        self._cond = threading.Condition()

    def start(self) -> None:
        with _LIVE_LOCK:
            _LIVE_WRITERS.add(self)
        super().start()

    @property
    def depth(self) -> int:
        with self._cond:
            return len(self._queue) + self._busy

    def offer(self, items: Sequence[tuple[Key, bytes]]) -> None:
        dropped = 0
        with self._cond:
            for key, blob in items:
                if key in self._queued:
                    continue
                if len(self._queue) >= self.capacity or self._stopped:
                    dropped += 1
                    continue
                self._queue.append((key, blob))
                self._queued.add(key)
            depth = len(self._queue)
            self._cond.notify_all()
        self.tier.record("put", "dropped", dropped)
        self.tier.recorder.queue_depth(self.tier.name, depth)

    def run(self) -> None:
        try:
            self._drain()
        finally:
            with _LIVE_LOCK:
                _LIVE_WRITERS.discard(self)

    def _drain(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopped:
                    self._cond.wait(0.5)
                if not self._queue:
                    return  # stopped (its queue dropped) or drained
                batch = [self._queue.popleft() for _ in range(min(self.batch, len(self._queue)))]
                self._busy = len(batch)
            try:
                results = self.tier.put_many(batch)
            except Exception:  # a tier bug must not kill the writer: count it, go on
                results = [False] * len(batch)
                self.tier.record("put", "error", len(batch))
            with self._cond:
                for (key, _), _ok in zip(batch, results, strict=True):
                    self._queued.discard(key)
                self._busy = 0
                depth = len(self._queue)
                self._cond.notify_all()
            self.tier.recorder.queue_depth(self.tier.name, depth)

    def flush(self, timeout_s: float) -> bool:
        with self._cond:
            done = self._cond.wait_for(
                lambda: not self._queue and not self._busy, max(0, timeout_s)
            )
            return bool(done)

    def stop(self) -> int:
        """Drop what is queued (counted) and let the thread end after the batch it is writing,
        if any; return how many writes are lost (dropped, plus the batch still running)."""
        with self._cond:
            self._stopped = True
            dropped = len(self._queue)
            for key, _ in self._queue:
                self._queued.discard(key)
            self._queue.clear()
            busy = self._busy
            self._cond.notify_all()
        self.tier.record("put", "dropped", dropped)
        self.tier.recorder.queue_depth(self.tier.name, 0)
        return dropped + busy


_LIVE_WRITERS: set[_Writer] = set()  # writers whose thread runs (of stores never closed too)
_LIVE_LOCK = threading.Lock()


@atexit.register
def _flush_at_exit() -> None:
    """Give unclosed stores' queued writes up to `EXIT_FLUSH_S` to finish, then say how many
    are lost (daemon threads die with the interpreter)."""
    with _LIVE_LOCK:
        writers = list(_LIVE_WRITERS)
    deadline = time.monotonic() + EXIT_FLUSH_S
    for writer in writers:
        writer.flush(deadline - time.monotonic())
    lost = {w.tier.name: w.stop() for w in writers}
    if sum(lost.values()):
        counts = ", ".join(f"{n} to the {name} tier" for name, n in lost.items() if n)
        warnings.warn(
            f"paged_kv: {sum(lost.values())} queued block writes were lost at exit ({counts}) "
            f"after waiting {EXIT_FLUSH_S:g} s; call TieredStore.close() (or flush()) before "
            "the program ends.",
            RuntimeWarning,
            stacklevel=1,
        )
