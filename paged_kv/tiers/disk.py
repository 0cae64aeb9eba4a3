"""The local-disk tier: one file per block in a directory, written crash-safely.

The embedded default: no server, it survives restarts. A block's file is written to a
temporary name in its final directory, fsync'ed, then renamed over the final name (atomic on
POSIX), so after a crash a block file is either absent or whole. The directory is not
fsync'ed: a rename lost in a power cut only loses the block (a miss later), never exposes a
partial one, and skipping it halves the cost of a write. At start the tier rebuilds its
index from the files: temporary files (left by a crash mid-write) are removed, and files
that fail verification are moved to `quarantine/`.

Layout: `root/<namespace>/<fingerprint>/<hash[:2]>/<hash>.kvb`, i.e. the key's three parts.
One process writes a directory at a time; a new process on the same directory (a restart)
finds everything the old one finished writing.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from paged_kv.cache.eviction import PolicySpec
from paged_kv.errors import CorruptBlock, InvalidArgument
from paged_kv.tiers.base import BudgetIndex, Key, Tier
from paged_kv.tiers.codec import decode_blob, parse_key

SUFFIX = ".kvb"
TMP_SUFFIX = ".tmp"
QUARANTINE = "quarantine"


class DiskTier(Tier):
    """Blobs as files under `root`, up to `capacity_bytes` (None: no limit), evicted by
    `eviction`. `fsync=False` trades crash safety for speed (tests of speed only)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        capacity_bytes: int | None = None,
        eviction: PolicySpec = "lru",
        fsync: bool = True,
    ) -> None:
        super().__init__("disk")
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise InvalidArgument(
                f"the disk tier's root {str(self.root)!r} is a file; give it a directory "
                "(it is created if missing)."
            )
        self.root.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self._index = BudgetIndex(capacity_bytes, eviction)
        self._lock = threading.Lock()
        self.recovery = self._rebuild_index()

    @property
    def capacity_bytes(self) -> int | None:
        return self._index.capacity

    def path_of(self, key: Key) -> Path:
        namespace, fingerprint, block_hash = parse_key(key)
        return self.root / namespace / fingerprint / block_hash[:2] / f"{block_hash}{SUFFIX}"

    # -- the interface ---------------------------------------------------------------------

    def count_leading(self, keys: Sequence[Key]) -> int:
        n = 0
        with self._lock:
            for key in keys:
                if key not in self._index:
                    break
                n += 1
        return n

    def get_many(self, keys: Sequence[Key]) -> list[bytes | None]:
        began = time.perf_counter()
        blobs: list[bytes | None] = []
        for key in keys:
            with self._lock:
                known = key in self._index
            blob = None
            if known:
                try:
                    blob = self.path_of(key).read_bytes()
                except OSError:  # evicted or removed meanwhile: a miss
                    with self._lock:
                        self._index.remove(key)
            blobs.append(blob)
        with self._lock:
            self._index.touch([k for k, b in zip(keys, blobs, strict=True) if b is not None])
        self.record_results("get", [b is not None for b in blobs], time.perf_counter() - began)
        self.record_moved("read", sum(len(b) for b in blobs if b is not None))
        return blobs

    def put_many(self, items: Sequence[tuple[Key, bytes]]) -> list[bool]:
        began = time.perf_counter()
        written: list[tuple[Key, int]] = []
        results: dict[Key, bool] = {}
        for key, blob in items:
            with self._lock:
                present = key in self._index
            if present or not self._index.fits(len(blob)):
                results[key] = present
                continue
            path = self.path_of(key)
            try:
                self._write_atomically(path, blob)
            except OSError:
                results[key] = False
                continue
            written.append((key, len(blob)))
            results[key] = True
        with self._lock:
            evicted = self._index.insert(written)
        for key in evicted:
            self._unlink(key)
            if key in results:
                results[key] = False
        out = [results[k] for k, _ in items]
        self.record_results("put", out, time.perf_counter() - began)
        self.record_moved("write", sum(size for _, size in written))
        self.record_evictions(len(evicted))
        self.report_usage()
        return out

    def delete(self, keys: Sequence[Key]) -> int:
        removed = 0
        for key in keys:
            with self._lock:
                known = self._index.remove(key)
            if known:
                self._unlink(key)
                removed += 1
        self.record("delete", "ok", removed)
        self.report_usage()
        return removed

    def usage(self) -> tuple[int, int]:
        with self._lock:
            return len(self._index), self._index.used

    def stored_keys(self) -> list[Key]:
        with self._lock:
            return self._index.keys()

    # -- files -----------------------------------------------------------------------------

    def _write_atomically(self, path: Path, blob: bytes) -> None:
        """Write to a temporary file beside `path`, fsync it, rename it over `path`."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}{TMP_SUFFIX}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
                f.flush()
                if self.fsync:
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise

    def _unlink(self, key: Key) -> None:
        with contextlib.suppress(OSError):
            self.path_of(key).unlink()

    def _rebuild_index(self) -> dict[str, int]:
        """Index every verified block file; remove temporary files; quarantine bad files.
        Files enter the eviction order oldest (by modification time) first."""
        found: list[tuple[float, Key, int]] = []
        removed_tmp = quarantined = 0
        for path in sorted(self.root.rglob("*")):
            if not path.is_file() or path.parts[len(self.root.parts)] == QUARANTINE:
                continue
            if path.name.endswith(TMP_SUFFIX):
                with contextlib.suppress(OSError):
                    path.unlink()
                removed_tmp += 1
                continue
            key = self._key_of_path(path)
            try:
                if key is None:
                    raise CorruptBlock("not a block file", reason="foreign file")
                blob = path.read_bytes()
                header, _ = decode_blob(blob, fingerprint=None, block_hash=None)
                if header.fingerprint.hex()[:32] != key.split(":")[1] or (
                    header.block_hash.hex() != key.split(":")[2]
                ):
                    raise CorruptBlock("file name and header disagree", reason="foreign block")
            except CorruptBlock as err:
                self._quarantine(path)
                self.record_corrupt(err.reason)
                quarantined += 1
                continue
            except OSError:
                continue
            found.append((path.stat().st_mtime, key, len(blob)))
        found.sort()
        with self._lock:
            evicted = self._index.insert([(k, size) for _, k, size in reversed(found)])
        for key in evicted:
            self._unlink(key)
        return {
            "blocks": len(self._index),
            "removed_temporary_files": removed_tmp,
            "quarantined": quarantined,
            "evicted": len(evicted),
        }

    def _key_of_path(self, path: Path) -> Key | None:
        parts = path.relative_to(self.root).parts
        if len(parts) != 4 or not parts[3].endswith(SUFFIX):
            return None
        key = f"{parts[0]}:{parts[1]}:{parts[3][: -len(SUFFIX)]}"
        try:
            parse_key(key)
        except ValueError:
            return None
        return key if parts[2] == parts[3][:2] else None

    def _quarantine(self, path: Path) -> None:
        target = self.root / QUARANTINE / f"{uuid.uuid4().hex[:8]}-{path.name}"
        target.parent.mkdir(exist_ok=True)
        try:
            os.replace(path, target)
        except OSError:
            with contextlib.suppress(OSError):
                path.unlink()
