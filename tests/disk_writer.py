"""A writer process for the crash test: writes blocks into a DiskTier until it is killed.

    python tests/disk_writer.py DIR BLOBS_FILE SEED

BLOBS_FILE holds JSON [[key, blob hex], ...]: real blocks of a prompt. The writer rewrites
them (deleting some first) between filler blocks of 16-256 KiB (an 8 MiB budget evicts old
ones), and makes fsync slow (2 ms), so that a SIGKILL at a random moment often lands
mid-write. Prints "ready" once its imports are done. Torch-free, so it starts fast.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time

from paged_kv.tiers import DiskTier, KeySpace, ModelFingerprint, encode_blob

_real_fsync = os.fsync


def slow_fsync(fd: int) -> None:
    _real_fsync(fd)
    time.sleep(0.002)


def main() -> None:
    root, blobs_file, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    os.fsync = slow_fsync
    rng = random.Random(seed)
    with open(blobs_file) as f:
        real = [(k, bytes.fromhex(b)) for k, b in json.load(f)]
    filler_space = KeySpace(
        "filler",
        ModelFingerprint("filler", "00" * 32, "uint8", 1, 1, 1, 1),
    )
    tier = DiskTier(root, capacity_bytes=8 << 20)
    print("ready", flush=True)
    deadline = time.monotonic() + 20  # bounded even if nobody kills it
    n = 0
    while time.monotonic() < deadline:
        victims = rng.sample(real, k=rng.randrange(0, len(real) // 2 + 1))
        tier.delete([k for k, _ in victims])
        for key, blob in real:
            tier.put_many([(key, blob)])
            size = rng.randrange(16 << 10, 256 << 10)
            block_hash = hashlib.sha256(f"{seed}-{n}".encode()).digest()
            filler = encode_blob(
                rng.randbytes(size),
                dtype="uint8",
                shape=(size,),
                fingerprint=filler_space.fingerprint_digest,
                block_hash=block_hash,
            )
            tier.put_many([(filler_space.key(block_hash), filler)])
            n += 1


if __name__ == "__main__":
    main()
