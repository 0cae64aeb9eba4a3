"""The disk tier (paged_kv/tiers/disk.py) under hostile input and files changed behind it:
paths that try to leave the root, links, FIFOs, devices and sparse files where block files
should be, a live writer's temporary files, and arguments refused before any directory is
made."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
from test_tiers_base import toy_blobs

from paged_kv.cache.hashing import block_hashes
from paged_kv.errors import InvalidArgument
from paged_kv.tiers import DiskTier, KeySpace, ModelFingerprint, Recorder, encode_blob
from paged_kv.tiers.codec import HEADER_SIZE
from paged_kv.tiers.disk import QUARANTINE, STALE_TMP_S

FP = ModelFingerprint("toy", "ab" * 32, "float32", 1, 1, 2, 2)
SPACE = KeySpace("disk", FP)
SECRET = b"a deployment secret, 32 bytes!!!"


def blobs(n: int, start: int = 0, secret: bytes | None = None) -> list[tuple[str, bytes]]:
    hashes = block_hashes(list(range(start, start + 2 * n)), 2)
    return [
        (
            SPACE.key(h),
            encode_blob(
                bytes([i]) * 32,
                dtype="float32",
                shape=FP.payload_shape,
                fingerprint=SPACE.fingerprint_digest,
                block_hash=h,
                secret=secret,
            ),
        )
        for i, h in enumerate(hashes)
    ]


def files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if not p.is_dir())


def finishes(fn, timeout: float = 5.0):
    """Run `fn` in a thread; fail if it has not returned within `timeout` (a hang)."""
    result: list = []
    thread = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"{fn} still running after {timeout} s"
    return result[0]


# -- paths stay inside the root --------------------------------------------------------------


@pytest.mark.parametrize("namespace", ["..", ".", "ns\n", "a/b"])
def test_a_key_whose_namespace_is_not_a_plain_name_is_refused_before_any_write(tmp_path, namespace):
    tier = DiskTier(tmp_path / "root")
    (_, blob), *_ = blobs(1)
    key = f"{namespace}:{SPACE.prefix.split(':')[1]}:{'0' * 64}"
    for call in (
        lambda: tier.put_many([(SPACE.key(b"\1" * 32), blob), (key, blob)]),
        lambda: tier.get_many([key]),
        lambda: tier.delete([key]),
    ):
        with pytest.raises(InvalidArgument, match="not a block key"):
            call()
    assert files(tmp_path) == [], "not even the valid first item was written"


def test_the_quarantine_folder_is_no_namespace(tmp_path):
    tier = DiskTier(tmp_path / "root")
    (_, blob), *_ = blobs(1)
    key = f"quarantine:{SPACE.prefix.split(':')[1]}:{'0' * 64}"
    for call in (
        lambda: tier.put_many([(SPACE.key(b"\1" * 32), blob), (key, blob)]),
        lambda: tier.get_many([key]),
    ):
        with pytest.raises(InvalidArgument, match="quarantine"):
            call()
    assert files(tmp_path) == [], "not even the valid first item was written"


def test_a_namespace_directory_linked_outside_the_root_is_never_written_or_read(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    tier = DiskTier(root)
    items = blobs(2)
    (root / "disk").symlink_to(outside, target_is_directory=True)
    assert tier.put_many(items) == [False, False]
    assert files(outside) == []
    assert tier.stats().count("put", "error") == 2
    (root / "disk").unlink()
    assert tier.put_many(items) == [True, True]
    os.rename(root / "disk", outside / "disk")  # the blocks now live outside...
    (root / "disk").symlink_to(outside / "disk", target_is_directory=True)  # ...behind a link
    assert tier.get_many([k for k, _ in items]) == [None, None]
    assert tier.stats().corrupt == 2 and tier.count_leading([items[0][0]]) == 0
    assert len(files(outside)) == 2, "nothing outside the root is moved or removed"


# -- what is read ----------------------------------------------------------------------------


def replace_with(path: Path, make) -> None:
    path.unlink()
    make(path)


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (os.mkfifo, "not a file"),
        (lambda p: p.symlink_to("/dev/zero"), "link"),
        (lambda p: os.truncate(p.write_bytes(b"") or p, 1 << 34), "size"),  # a sparse 16 GiB
        (lambda p: p.write_bytes(blobs(1, start=50)[0][1] + b"\0"), "size"),
    ],
    ids=["fifo", "link-to-dev-zero", "sparse-16-GiB", "one-byte-more"],
)
def test_a_block_file_replaced_behind_a_live_tier_is_a_bounded_miss(tmp_path, make, reason):
    tier = DiskTier(tmp_path, fsync=False)
    items = blobs(2)
    keys = [k for k, _ in items]
    tier.put_many(items)
    replace_with(tier.path_of(keys[0]), make)
    assert finishes(lambda: tier.get_many(keys)) == [None, items[1][1]]
    stats = tier.stats()
    assert stats.corrupt == 1 and tier.count_leading(keys) == 0
    assert not tier.path_of(keys[0]).exists() and not tier.path_of(keys[0]).is_symlink()
    assert len(list((tmp_path / QUARANTINE).iterdir())) == 1, reason
    assert tier.put_many(items[:1]) == [True] and tier.get_many(keys[:1]) == [items[0][1]]


def test_a_restart_sets_aside_links_fifos_and_oversized_files_without_following_them(tmp_path):
    tier = DiskTier(tmp_path, fsync=False, capacity_bytes=1 << 20)
    items = blobs(5)
    tier.put_many(items)
    paths = [tier.path_of(k) for k, _ in items]
    secret_file = tmp_path.parent / f"{tmp_path.name}-secret.txt"
    secret_file.write_text("not yours")
    replace_with(paths[0], lambda p: p.symlink_to(secret_file))
    replace_with(paths[1], os.mkfifo)
    replace_with(paths[2], lambda p: os.truncate(p.write_bytes(b"") or p, 1 << 33))
    (paths[3].parent.parent / "ff").symlink_to(tmp_path.parent, target_is_directory=True)
    restarted = finishes(lambda: DiskTier(tmp_path, fsync=False, capacity_bytes=1 << 20))
    assert restarted.recovery["blocks"] == 2 and restarted.recovery["quarantined"] == 4
    assert sorted(restarted.stored_keys()) == sorted(k for k, _ in items[3:])
    assert secret_file.read_text() == "not yours"
    quarantined = list((tmp_path / QUARANTINE).iterdir())
    assert sum(p.is_symlink() for p in quarantined) == 2, "links are moved, never followed"


def test_authenticated_blobs_survive_a_restart(tmp_path):
    items = blobs(3, secret=SECRET)
    DiskTier(tmp_path, fsync=False).put_many(items)
    restarted = DiskTier(tmp_path, fsync=False)
    assert restarted.recovery["quarantined"] == 0
    assert restarted.get_many([k for k, _ in items]) == [b for _, b in items]


# -- temporary files of live and dead writers ------------------------------------------------


def tmp_name(pid: int) -> str:
    return f".{'a' * 64}.{pid}.0123abcd.tmp"


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_restart_keeps_a_live_writers_temporary_files_and_removes_stale_ones(tmp_path):
    tier = DiskTier(tmp_path, fsync=False)
    tier.put_many(blobs(1))
    folder = tier.path_of(blobs(1)[0][0]).parent
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = {
            "this process": folder / tmp_name(os.getpid()),
            "another live process": folder / tmp_name(sleeper.pid),
        }
        stale = {
            "a dead writer": folder / tmp_name(dead_pid()),
            "a name no writer makes": folder / ".torn.tmp",
            "a pid no process has": folder / tmp_name(2**40),
        }
        old = folder / tmp_name(os.getpid()).replace("0123abcd", "00000000")
        for path in [*live.values(), *stale.values(), old]:
            path.write_bytes(b"PKVB half")
        long_ago = time.time() - STALE_TMP_S - 1
        os.utime(old, (long_ago, long_ago))  # a live pid, but older than any write takes
        restarted = DiskTier(tmp_path, fsync=False)
        assert restarted.recovery["removed_temporary_files"] == 4
        assert restarted.recovery["quarantined"] == 0 and restarted.recovery["blocks"] == 1
        for why, path in live.items():
            assert path.exists(), f"the temporary file of {why} was removed"
        for why, path in stale.items():
            assert not path.exists(), f"the temporary file of {why} was kept"
        assert not old.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert DiskTier(tmp_path, fsync=False).recovery["removed_temporary_files"] == 1


def test_a_writer_names_its_temporary_file_after_its_pid(tmp_path, monkeypatch):
    tier = DiskTier(tmp_path, fsync=False)
    seen = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: seen.append(Path(a).name) or real_replace(a, b))
    tier.put_many(blobs(1))
    (name,) = seen
    assert name.startswith(f".{blobs(1)[0][0].split(':')[2]}.{os.getpid()}.")
    assert name.endswith(".tmp")


# -- arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "root", [123, None, b"bytes/path", ""], ids=["int", "none", "bytes", "empty"]
)
def test_a_root_that_is_not_a_path_is_refused(root):
    with pytest.raises(InvalidArgument, match="directory path"):
        DiskTier(root)


def test_a_root_that_cannot_be_made_is_a_typed_error():
    with pytest.raises(InvalidArgument, match="cannot create"):
        DiskTier("/proc/paged_kv_disk_tier")


@pytest.mark.parametrize(
    "args",
    [{"capacity_bytes": -5}, {"capacity_bytes": 0}, {"eviction": "nope"}, {"fsync": "yes"}],
    ids=["negative", "zero", "policy", "fsync"],
)
def test_bad_arguments_are_refused_before_the_directory_is_made(tmp_path, args):
    with pytest.raises(InvalidArgument):
        DiskTier(tmp_path / "never", **args)
    assert not (tmp_path / "never").exists()


def test_a_batch_with_a_key_twice_writes_it_once(tmp_path):
    tier = DiskTier(tmp_path, fsync=False, capacity_bytes=3 * len(blobs(1)[0][1]))
    items = blobs(4)
    batch = [items[0], items[1], items[0], items[2], items[3], items[1]]
    results = tier.put_many(batch)
    assert len(results) == len(batch)
    held = set(tier.stored_keys())
    assert results == [k in held for k, _ in batch]
    assert tier.usage() == (3, 3 * len(items[0][1]))
    assert {tier.path_of(k) for k in held} == set(tmp_path.rglob("*.kvb"))
    assert tier.stats().bytes_written == 4 * len(items[0][1]), "each block written once"


def test_a_blob_that_is_not_bytes_is_refused_before_any_write(tmp_path):
    tier = DiskTier(tmp_path, fsync=False)
    (key, blob), (other, _) = blobs(2)
    with pytest.raises(InvalidArgument, match="blobs"):
        tier.put_many([(key, blob), (other, "text")])
    assert files(tmp_path) == []


# Behaviours that mutation testing (tools/mutation_test.py) found no test pinning, in the tiers:
# each test here kills at least one mutant that survived every other test of its module.


def test_a_disk_block_removed_behind_the_tiers_back_is_a_miss_it_then_forgets(tmp_path):
    """A file that vanished (removed by hand, or by another process's eviction) is a miss
    once, then the tier no longer claims the block and a new put writes it again."""
    tier = DiskTier(tmp_path, fsync=False)
    items = toy_blobs(2)
    keys = [k for k, _ in items]
    tier.put_many(items)
    tier.path_of(keys[0]).unlink()
    assert tier.get_many(keys) == [None, items[1][1]]
    assert tier.count_leading(keys) == 0
    assert tier.usage() == (1, len(items[1][1]))
    assert tier.put_many(items[:1]) == [True]
    assert tier.get_many(keys[:1]) == [items[0][1]]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts fds in /proc/self/fd")
def test_reading_blocks_leaves_no_file_open(tmp_path):
    """Every read closes its file: hits, a restart's verification, and refused files."""
    tier = DiskTier(tmp_path, fsync=False)
    items = blobs(4)
    tier.put_many(items)
    before = open_fds()
    for _ in range(5):
        assert tier.get_many([k for k, _ in items]) == [b for _, b in items]
    DiskTier(tmp_path, fsync=False)
    path = tier.path_of(items[0][0])
    path.write_bytes(path.read_bytes() + b"junk")  # the wrong size: refused, quarantined
    assert tier.get_many([items[0][0]]) == [None]
    assert open_fds() == before


def test_a_block_file_in_a_folder_that_is_no_namespace_is_set_aside_at_restart(tmp_path):
    """A whole, valid block file copied under a folder name no key can have (a space) is no
    block of the tier: a restart quarantines it rather than index a key it cannot name."""
    tier = DiskTier(tmp_path, fsync=False)
    (key, blob), *_ = blobs(1)
    tier.put_many([(key, blob)])
    good = tier.path_of(key)
    stray = tmp_path / "not a namespace" / good.relative_to(tmp_path / SPACE.namespace)
    stray.parent.mkdir(parents=True)
    stray.write_bytes(blob)
    restarted = DiskTier(tmp_path, fsync=False)
    assert restarted.recovery["blocks"] == 1 and restarted.recovery["quarantined"] == 1
    assert restarted.stored_keys() == [key] and not stray.exists()
    assert restarted.stats().corrupt == 1


def test_a_block_file_that_grows_while_it_is_read_is_read_to_its_stored_size(tmp_path, monkeypatch):
    """A reader takes at most the size it found the file at (and the index knows), however
    much is appended meanwhile: the block is served whole, the bytes after it never read."""
    tier = DiskTier(tmp_path, fsync=False)
    (key, blob), *_ = blobs(1)
    tier.put_many([(key, blob)])
    path = tier.path_of(key)
    inode = path.stat().st_ino
    real_fstat = os.fstat

    def fstat_then_grow(fd):
        info = real_fstat(fd)
        if info.st_ino == inode:
            with open(path, "ab") as f:  # another writer appends after the size is taken
                f.write(b"x" * 4096)
        return info

    monkeypatch.setattr(os, "fstat", fstat_then_grow)
    assert tier.get_many([key]) == [blob]


def test_a_temporary_file_naming_a_pid_beyond_any_process_is_removed_at_restart(tmp_path):
    """Pids are below 2**31: a name with 2**31 (or more) is no live writer's, and asking
    the kernel about it would overflow."""
    tier = DiskTier(tmp_path, fsync=False)
    tier.put_many(blobs(1))
    folder = tier.path_of(blobs(1)[0][0]).parent
    for pid in (2**31, 2**32 - 1):
        (folder / tmp_name(pid)).write_bytes(b"PKVB half")
    restarted = DiskTier(tmp_path, fsync=False)
    assert restarted.recovery["removed_temporary_files"] == 2
    assert not list(folder.glob("*.tmp"))


# -- a file's header first, then at most what it declares ------------------------------------


class Reasons(Recorder):
    """Records the reason of every corrupt blob a tier reports."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def corrupt(self, tier: str, reason: str) -> None:
        self.seen.append(reason)


def preads(monkeypatch) -> list[int]:
    """The size of every positioned read the disk tier makes from now on."""
    sizes: list[int] = []
    real = os.pread

    def pread(fd, size, offset):
        sizes.append(size)
        return real(fd, size, offset)

    monkeypatch.setattr(os, "pread", pread)
    return sizes


@pytest.mark.parametrize(
    "claim", ["zeros", "a valid header"], ids=["sparse zeros", "header says 144 bytes"]
)
def test_a_restart_reads_a_huge_files_header_and_no_more(tmp_path, monkeypatch, claim):
    """A 256 MiB sparse file under a 512 MiB budget: before, the restart read all of it to
    look at its first 112 bytes; now it reads the header, sees the size disagree, and sets
    the file aside, counted as corrupt."""
    tier = DiskTier(tmp_path, fsync=False)
    (key, blob), *_ = blobs(1)
    tier.put_many([(key, blob)])
    path = tier.path_of(key)
    path.write_bytes(blob[:HEADER_SIZE] if claim == "a valid header" else b"")
    os.truncate(path, 256 << 20)
    sizes = preads(monkeypatch)
    tracemalloc.start()
    try:
        restarted = DiskTier(tmp_path, fsync=False, capacity_bytes=512 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert restarted.recovery["quarantined"] == 1 and restarted.recovery["blocks"] == 0
    assert sizes == [HEADER_SIZE], "the header, and nothing after it"
    assert peak < 1 << 20, f"{peak} bytes traced reading a 256 MiB file"


def test_a_file_whose_size_disagrees_with_its_header_is_never_read_past_it(tmp_path, monkeypatch):
    tier = DiskTier(tmp_path, fsync=False)
    items = blobs(2)
    tier.put_many(items)
    path = tier.path_of(items[0][0])
    path.write_bytes(items[0][1][:HEADER_SIZE] + b"\0" * (len(items[0][1]) - HEADER_SIZE + 1))
    restarted = DiskTier(tmp_path, fsync=False)
    assert restarted.recovery["quarantined"] == 1 and restarted.stored_keys() == [items[1][0]]
    sizes = preads(monkeypatch)
    assert restarted.get_many([k for k, _ in items]) == [None, items[1][1]]
    assert sizes == [HEADER_SIZE, len(items[1][1])], "only the good file is read past its header"


def test_get_many_refuses_a_block_larger_than_max_bytes_without_reading_it(tmp_path, monkeypatch):
    """The store passes its fingerprint's largest blob as `max_bytes`: a stored block larger
    than that (another writer's, or planted under our key) is counted, quarantined and never
    opened."""
    big = ModelFingerprint("toy", "ab" * 32, "float32", 4, 8, 64, 16)  # 256 KiB a block
    space = KeySpace("disk", big)
    (h,) = block_hashes([1, 2], 2)
    blob = encode_blob(
        bytes(big.payload_bytes), dtype="float32", shape=big.payload_shape,
        fingerprint=space.fingerprint_digest, block_hash=h,
    )  # fmt: skip
    tier = DiskTier(tmp_path, fsync=False)
    reasons = Reasons()
    tier.recorder = reasons
    assert tier.put_many([(space.key(h), blob)]) == [True]
    sizes = preads(monkeypatch)
    tracemalloc.start()
    try:
        got = tier.get_many([space.key(h)], max_bytes=FP.max_blob_bytes)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == [None] and sizes == [], "not even its header was read"
    assert peak < len(blob) // 4
    assert reasons.seen == ["size"] and tier.count_leading([space.key(h)]) == 0
    assert len(list((tmp_path / QUARANTINE).iterdir())) == 1
    assert tier.put_many([(space.key(h), blob)]) == [True]
    assert tier.get_many([space.key(h)], max_bytes=big.max_blob_bytes) == [blob]


@pytest.mark.parametrize("max_bytes", [0, -1, 1.5, "64", True])
def test_a_bad_max_bytes_is_refused_before_anything_is_read(tmp_path, max_bytes):
    tier = DiskTier(tmp_path, fsync=False)
    items = blobs(1)
    tier.put_many(items)
    with pytest.raises(InvalidArgument, match="max_bytes"):
        tier.get_many([items[0][0]], max_bytes=max_bytes)
    assert tier.stats().count("get", "ok") == 0
