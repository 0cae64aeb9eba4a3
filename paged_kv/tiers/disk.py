"""The local-disk tier: one file per block in a directory, written crash-safely.

The embedded default: no server, it survives restarts. A block's file is written to a
temporary name in its final directory, fsync'ed, then renamed over the final name (atomic on
POSIX), so after a crash a block file is either absent or whole. The directory is not
fsync'ed: a rename lost in a power cut only loses the block (a miss later), never exposes a
partial one, and skipping it halves the cost of a write. At start the tier rebuilds its
index from the files: temporary files left by a dead writer (or older than `STALE_TMP_S`)
are removed, those of a live writer kept, and files that fail verification are moved to
`quarantine/`.

Layout: `root/<namespace>/<fingerprint>/<hash[:2]>/<hash>.kvb`, i.e. the key's three parts.
One process writes a directory at a time; a new process on the same directory (a restart)
finds everything the old one finished writing.

Nothing in the directory is trusted: every path is checked to resolve inside the root, a
block file is opened without following a link and without blocking (a FIFO), only a regular
file is read, its 112-byte header first, and then only when the file's size is what that
header (and the index, and the caller's `max_bytes`) says.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from paged_kv.cache.eviction import PolicySpec
from paged_kv.errors import CorruptBlock, InvalidArgument
from paged_kv.tiers.base import BudgetIndex, Key, Tier, check_max_bytes
from paged_kv.tiers.codec import (
    HEADER_SIZE,
    MAX_BLOB_BYTES,
    blob_sizes,
    check_integrity,
    parse_key,
    read_header,
)

SUFFIX = ".kvb"
TMP_SUFFIX = ".tmp"
QUARANTINE = "quarantine"
# A temporary file is `.<hash>.<writer pid>.<8 hex>.tmp`: a restart removes it when that
# writer is dead, or when it is older than this (the pid may have been reused).
STALE_TMP_S = 600.0
_TMP_NAME = re.compile(r"\.[0-9a-f]{64}\.([0-9]+)\.[0-9a-f]{8}\.tmp")
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


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
        if not isinstance(root, str | os.PathLike) or not str(root):
            raise InvalidArgument(
                f"the disk tier's root is a directory path (str or pathlib.Path), got "
                f"{root!r}; e.g. DiskTier('kv-cache/')."
            )
        if not isinstance(fsync, bool):
            raise InvalidArgument(f"fsync is True or False, got {fsync!r}.")
        self._index = BudgetIndex(capacity_bytes, eviction)  # checked before any mkdir
        self.root = Path(root)
        if self.root.exists() and not self.root.is_dir():
            raise InvalidArgument(
                f"the disk tier's root {str(self.root)!r} is a file; give it a directory "
                "(it is created if missing)."
            )
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise InvalidArgument(
                f"cannot create the disk tier's root {str(self.root)!r} ({err.strerror}); "
                "give a directory this process may write."
            ) from err
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise InvalidArgument(
                f"the disk tier's root {str(self.root)!r} is not writable by this process; "
                "give a directory it may write."
            )
        self._real_root = os.path.realpath(self.root)
        self.fsync = fsync
        self._lock = threading.Lock()
        self.recovery = self._rebuild_index()

    @property
    def capacity_bytes(self) -> int | None:
        return self._index.capacity

    def path_of(self, key: Key) -> Path:
        namespace, fingerprint, block_hash = parse_key(key)
        if namespace == QUARANTINE:  # its files would mix with refused ones, unindexed
            raise InvalidArgument(
                f"the namespace {QUARANTINE!r} is the disk tier's folder for files that fail "
                "verification; pick another namespace."
            )
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

    def get_many(self, keys: Sequence[Key], max_bytes: int | None = None) -> list[bytes | None]:
        paths = [self.path_of(k) for k in keys]  # every key checked before anything is read
        limit = check_max_bytes(max_bytes)
        began = time.perf_counter()
        blobs: list[bytes | None] = []
        for key, path in zip(keys, paths, strict=True):
            with self._lock:
                size = self._index.size_of(key)
            blob = None
            if size is not None:
                try:
                    if size > limit:  # another fingerprint's size, or planted: never read
                        raise CorruptBlock(f"{size} bytes, at most {limit} asked", reason="size")
                    blob = self._read(path, size)
                except CorruptBlock as err:  # replaced behind our back: counted, set aside
                    self.record_corrupt(err.reason)
                    self._forget(key)
                    if self._inside(path):
                        self._quarantine(path)
                except OSError:  # evicted or removed meanwhile: a miss
                    self._forget(key)
            blobs.append(blob)
        with self._lock:
            self._index.touch([k for k, b in zip(keys, blobs, strict=True) if b is not None])
        self.record_results("get", [b is not None for b in blobs], time.perf_counter() - began)
        self.record_moved("read", sum(len(b) for b in blobs if b is not None))
        return blobs

    def put_many(self, items: Sequence[tuple[Key, bytes]]) -> list[bool]:
        paths = [self.path_of(k) for k, _ in items]
        for _, blob in items:
            if not isinstance(blob, bytes | bytearray | memoryview):
                raise InvalidArgument(
                    f"a tier stores blobs (bytes), got {type(blob).__name__}; make them with "
                    "encode_blob."
                )
        began = time.perf_counter()
        written: list[tuple[Key, int]] = []
        results: dict[Key, bool] = {}
        for (key, blob), path in zip(items, paths, strict=True):
            with self._lock:
                present = key in self._index
            if present or key in results or not self._index.fits(len(blob)):
                results[key] = present or results.get(key, False)
                continue
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
        for key in keys:
            parse_key(key)
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

    def _inside(self, path: Path) -> bool:
        """Does `path`'s directory resolve (links followed) inside the root?"""
        return os.path.realpath(path.parent).startswith(self._real_root + os.sep)

    def _read(self, path: Path, size: int | None) -> bytes:
        """The bytes of the block file at `path`: a regular file, not a link, of `size` bytes
        (None: at most the budget or `MAX_BLOB_BYTES`) that its header agrees with. The
        header is read first; the rest only when the file's size is one the header allows.
        Raises `CorruptBlock` for what is not such a file, `OSError` when there is none."""
        if not self._inside(path):
            raise CorruptBlock("a block path leads outside the root", reason="outside root")
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise CorruptBlock("a link where a block file should be", reason="link") from err
            raise
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise CorruptBlock("not a regular file", reason="not a file")
            limit = self._index.capacity or MAX_BLOB_BYTES
            if (size is not None and info.st_size != size) or info.st_size > limit:
                raise CorruptBlock(
                    f"a file of {info.st_size} bytes where a block of {size or limit} "
                    "bytes (at most) was stored",
                    reason="size",
                )
            header = read_header(_read_at(fd, 0, HEADER_SIZE))
            if info.st_size not in blob_sizes(header):
                raise CorruptBlock("the file's size is not what its header says", reason="size")
            return _read_at(fd, 0, info.st_size)
        finally:
            os.close(fd)

    def _write_atomically(self, path: Path, blob: bytes | bytearray | memoryview) -> None:
        """Write to a temporary file beside `path`, fsync it, rename it over `path`."""
        if not self._inside(path):
            raise OSError(errno.EXDEV, "a block directory leads outside the root", str(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}{TMP_SUFFIX}")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(tmp, flags, 0o644)
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

    def _forget(self, key: Key) -> None:
        with self._lock:
            self._index.remove(key)

    def _unlink(self, key: Key) -> None:
        path = self.path_of(key)
        if self._inside(path):
            with contextlib.suppress(OSError):
                path.unlink()

    def _rebuild_index(self) -> dict[str, int]:
        """Index every verified block file; remove stale temporary files; quarantine bad
        files, links and anything that is not a regular file. Files enter the eviction order
        oldest (by modification time) first."""
        found: list[tuple[float, Key, int]] = []
        removed_tmp = quarantined = 0
        for path, info in self._entries():
            if path.name.endswith(TMP_SUFFIX) and stat.S_ISREG(info.st_mode):
                if _is_stale_tmp(path.name, info.st_mtime):
                    with contextlib.suppress(OSError):
                        path.unlink()
                    removed_tmp += 1
                continue
            key = self._key_of_path(path)
            try:
                if key is None:
                    raise CorruptBlock("not a block file", reason="foreign file")
                if not stat.S_ISREG(info.st_mode):
                    raise CorruptBlock("not a regular file", reason="not a file")
                blob = self._read(path, None)
                header = check_integrity(blob)
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
            found.append((info.st_mtime, key, len(blob)))
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

    def _entries(self) -> list[tuple[Path, os.stat_result]]:
        """Every entry under the root that is not a directory (links to directories
        included, never followed: os.walk without followlinks does not descend into a link),
        with its lstat; the quarantine is left out."""
        entries: list[tuple[Path, os.stat_result]] = []
        for top, dirs, files in os.walk(self.root, followlinks=False):
            here = Path(top)
            if here == self.root:
                dirs[:] = [d for d in dirs if d != QUARANTINE]
            for name in sorted(dirs) + sorted(files):
                path = here / name
                with contextlib.suppress(OSError):
                    info = path.lstat()
                    if not stat.S_ISDIR(info.st_mode):
                        entries.append((path, info))
        return entries

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
        """Move the entry at `path` (a file, a link or a FIFO: never followed) aside."""
        target = self.root / QUARANTINE / f"{uuid.uuid4().hex[:8]}-{path.name}"
        try:
            target.parent.mkdir(exist_ok=True)
            if target.parent.is_symlink():
                raise OSError(errno.ELOOP, "the quarantine is a link", str(target.parent))
            os.replace(path, target)
        except OSError:
            with contextlib.suppress(OSError):
                path.unlink()


def _read_at(fd: int, offset: int, size: int) -> bytes:
    """At most `size` bytes of `fd` from `offset` (fewer if the file shrank meanwhile); one
    read is one bytes object, never copied."""
    chunks: list[bytes] = []
    while size > 0:
        chunk = os.pread(fd, size, offset)  # `size` is bounded by the caller
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _is_stale_tmp(name: str, mtime: float) -> bool:
    """A temporary file no live writer will rename: its writer's process is gone, it is
    older than `STALE_TMP_S`, or its name is not one a writer makes."""
    match = _TMP_NAME.fullmatch(name)
    if match is None or time.time() - mtime > STALE_TMP_S:
        return True
    return not _process_alive(int(match.group(1)))


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    if not 0 < pid < 2**31:
        return False  # no process has it
    try:
        os.kill(pid, 0)  # signal 0: is it there? (sends nothing)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True
