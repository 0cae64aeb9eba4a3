"""Chapter 07 checks: a learner's blob codec verifies what it reads, their run across tiers
stops at the first gap, and their circuit breaker opens, waits and closes like the library's."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from typing import Any

from paged_kv.course.checks.failures import CheckFailed, expect, expect_raises, passed
from paged_kv.errors import CorruptBlock
from paged_kv.tiers.breaker import CircuitBreaker
from paged_kv.tiers.codec import encode_blob
from paged_kv.tiers.store import longest_run

FP = hashlib.sha256(b"the learner's model").digest()
OTHER_FP = hashlib.sha256(b"someone else's model").digest()


def _hash(i: int) -> bytes:
    return hashlib.sha256(f"block {i}".encode()).digest()


def _case(rng: random.Random) -> dict[str, Any]:
    dtype, size = rng.choice([("float32", 4), ("float16", 2), ("bfloat16", 2), ("int8", 1)])
    shape = tuple(rng.randint(1, 3) for _ in range(rng.randint(1, 5)))
    count = 1
    for d in shape:
        count *= d
    return {
        "payload": rng.randbytes(count * size),
        "dtype": dtype,
        "shape": shape,
        "fingerprint": FP,
        "block_hash": _hash(rng.randrange(1000)),
    }


def check_blob_codec(encode: Callable[..., bytes], decode: Callable[..., Any]) -> None:
    """`encode(payload, dtype=, shape=, fingerprint=, block_hash=)` writes the chapter's blob
    format; `decode(blob, fingerprint=, block_hash=)` returns (header, payload) and raises
    CorruptBlock for anything damaged or foreign."""
    rng = random.Random(7)
    for _ in range(20):
        case = _case(rng)
        blob = encode(**case)
        expect(
            isinstance(blob, bytes | bytearray),
            f"encode must return bytes, got {type(blob).__name__}.",
        )
        want = encode_blob(**case)
        expect(
            bytes(blob[:4]) == b"PKVB",
            "a blob starts with the magic b'PKVB' (struct format '4s', first field).",
        )
        expect(
            len(blob) == len(want),
            f"a {case['dtype']} payload of shape {case['shape']} makes a blob of {len(want)} "
            f"bytes (112-byte header + payload), yours has {len(blob)}.",
        )
        expect(
            bytes(blob) == want,
            "your blob differs from the chapter's format: pack FIELDS with magic, version, "
            "dtype code, ndim, the shape padded with zeros to 6 dims, fingerprint, block hash, "
            "payload length and zlib.crc32(payload); then CRC.pack(zlib.crc32(fields)); then "
            "the payload.",
        )
        header, payload = decode(blob, fingerprint=FP, block_hash=case["block_hash"])
        expect(
            bytes(payload) == case["payload"],
            "decode must return the payload bytes that were encoded, unchanged.",
        )
        expect(
            (header.dtype, tuple(header.shape)) == (case["dtype"], case["shape"]),
            f"decode's header says {header.dtype} {tuple(header.shape)}, the blob holds "
            f"{case['dtype']} {case['shape']}.",
        )
    case = _case(random.Random(1))
    blob = encode_blob(**case)
    for i in range(len(blob)):
        for flip in (0x01, 0x80, 0xFF):
            damaged = bytearray(blob)
            damaged[i] ^= flip
            region = "header" if i < 112 else "payload"
            _expect_corrupt(
                lambda d=bytes(damaged): decode(d, fingerprint=FP, block_hash=case["block_hash"]),
                f"byte {i} (in the {region}) xor {flip:#04x}",
                "check the magic, the header CRC (over the first 108 bytes), the version, "
                "the dtype and shape against the length, and the payload CRC",
            )
    for cut in (0, 50, 111, 112, len(blob) - 1):
        _expect_corrupt(
            lambda c=cut: decode(blob[:c], fingerprint=FP, block_hash=case["block_hash"]),
            f"a blob cut to {cut} of its {len(blob)} bytes",
            "compare len(blob) with the header size first, then the payload length with the "
            "header's",
        )
    _expect_corrupt(
        lambda: decode(blob + b"\0", fingerprint=FP, block_hash=case["block_hash"]),
        "a blob with one byte too many",
        "the payload must be exactly the header's payload length",
    )
    _expect_corrupt(
        lambda: decode(blob, fingerprint=OTHER_FP, block_hash=case["block_hash"]),
        "a blob written for another model's fingerprint",
        "compare the header's fingerprint with the one asked for",
    )
    _expect_corrupt(
        lambda: decode(blob, fingerprint=FP, block_hash=_hash(99_999)),
        "a blob holding another block",
        "compare the header's block hash with the one asked for",
    )
    rebuilt = decode(blob, fingerprint=None, block_hash=None)
    expect(
        bytes(rebuilt[1]) == case["payload"],
        "fingerprint=None and block_hash=None mean 'accept any': only integrity is checked.",
    )
    passed("blob codec with verification")


def _expect_corrupt(action: Callable[[], Any], what: str, hint: str) -> None:
    try:
        action()
    except CorruptBlock:
        return
    except NotImplementedError:
        raise
    except Exception as exc:
        raise CheckFailed(
            f"{what}: decode raised {exc!r}; raise CorruptBlock (from paged_kv.errors) for "
            f"every bad blob, so the store can count it, delete it and treat it as a miss."
        ) from exc
    raise CheckFailed(f"{what} was accepted; {hint}.")


class _CountingTier:
    """A tier that holds some keys, for the run checks; counts `count_leading` calls."""

    def __init__(self, name: str, keys: Sequence[str]) -> None:
        self.name = name
        self.keys = set(keys)
        self.calls = 0

    def count_leading(self, keys: Sequence[str]) -> int:
        self.calls += 1
        n = 0
        for key in keys:
            if key not in self.keys:
                break
            n += 1
        return n

    def __repr__(self) -> str:
        return self.name


def check_longest_run(fn: Callable[[Sequence[str], Sequence[Any]], list[Any]]) -> None:
    """`fn(keys, tiers)` returns the tier to read each block of the longest run of `keys`
    present in some tier, fastest tier first, stopping at the first gap."""
    keys = [f"k{i}" for i in range(8)]

    def names(run: list[Any]) -> list[str]:
        return [t.name for t in run]

    host = _CountingTier("host", ["k0", "k3"])
    disk = _CountingTier("disk", ["k0", "k1", "k2"])
    remote = _CountingTier("remote", ["k4", "k6", "k7"])
    got = fn(keys, [host, disk, remote])
    expect(
        isinstance(got, list) and names(got) == ["host", "disk", "disk", "host", "remote"],
        "host holds k0 k3, disk k0 k1 k2, remote k4 k6 k7: the run is k0 from host (the "
        "fastest tier that has it), k1 k2 from disk, k3 from host, k4 from remote, and it "
        "stops at k5, which no tier holds, although k6 and k7 are present (without k5 they "
        f"are useless). Expected [host, disk, disk, host, remote], got {got!r}.",
    )
    expect(fn([], [host]) == [], "an empty list of keys gives an empty run.")
    expect(fn(keys, []) == [], "with no tiers nothing is found.")
    expect(
        names(fn(keys[5:], [host, disk, remote])) == [],
        "a run that starts with a missing key is empty.",
    )
    lazy = [_CountingTier("host", keys[:6]), _CountingTier("disk", keys)]
    fn(keys[:6], lazy)
    expect(
        lazy[1].calls == 0,
        "when the first tier holds the whole run, the slower tiers must not be asked at "
        "all (each remote call is a round trip).",
    )
    rng = random.Random(5)
    for trial in range(200):
        n = rng.randint(0, 10)
        ks = [f"x{trial}-{i}" for i in range(n)]
        tiers = [
            _CountingTier(name, [k for k in ks if rng.random() < 0.5])
            for name in rng.sample(["host", "disk", "remote"], rng.randint(1, 3))
        ]
        want = names(longest_run(ks, tiers))  # type: ignore[arg-type]
        mine = names(fn(ks, tiers))
        expect(
            mine == want,
            f"keys {ks} with tiers {[(t.name, sorted(t.keys)) for t in tiers]}: expected "
            f"{want}, got {mine}.",
        )
    passed("longest run across tiers")


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def check_circuit_breaker(cls: type) -> None:
    """`cls(failure_threshold, cooldown_s, clock=...)` has `allow()`, `record_success()`,
    `record_failure()` and `state` ("closed", "open" or "half-open") like the library's."""
    clock = _Clock()
    breaker = cls(3, 2.0, clock=clock)
    expect(breaker.state == "closed", f"a new breaker is closed, yours is {breaker.state!r}.")
    for i in range(2):
        expect(breaker.allow(), "a closed breaker lets every call through.")
        breaker.record_failure()
        expect(
            breaker.state == "closed",
            f"after {i + 1} failure(s) with failure_threshold=3 it must still be closed.",
        )
    breaker.allow()
    breaker.record_success()
    for _ in range(2):
        breaker.allow()
        breaker.record_failure()
    expect(
        breaker.state == "closed",
        "a success resets the count: failures must be *in a row* to open the breaker.",
    )
    breaker.allow()
    breaker.record_failure()
    expect(breaker.state == "open", "3 failures in a row open the breaker.")
    expect(
        not breaker.allow(),
        "an open breaker refuses calls at once (the engine recomputes instead of waiting).",
    )
    clock.now += 1.99
    expect(not breaker.allow(), "it stays open for the whole cooldown (2 s here).")
    clock.now += 0.01
    expect(breaker.allow(), "after the cooldown, one trial call is allowed.")
    expect(breaker.state == "half-open", "while the trial call runs, the state is 'half-open'.")
    expect(
        not breaker.allow(),
        "only one trial call at a time: a second call while half-open is refused.",
    )
    breaker.record_failure()
    expect(
        breaker.state == "open" and not breaker.allow(),
        "a failed trial opens the breaker again, for a new cooldown.",
    )
    clock.now += 2.0
    expect(breaker.allow(), "after another cooldown, another trial.")
    breaker.record_success()
    expect(
        breaker.state == "closed" and breaker.allow(),
        "a successful trial closes the breaker: the store is back in use.",
    )
    expect_raises(Exception, lambda: cls(0, 1.0, clock=clock), "failure_threshold=0")
    rng = random.Random(11)
    for trial in range(100):
        threshold, cooldown = rng.randint(1, 4), rng.choice([0.0, 0.5, 1.0])
        c1, c2 = _Clock(), _Clock()
        mine = cls(threshold, cooldown, clock=c1)
        ref = CircuitBreaker(threshold, cooldown, clock=c2)
        history = []
        for _ in range(30):
            step = rng.random()
            if step < 0.2:
                dt = rng.choice([0.1, 0.5, 1.0])
                c1.now += dt
                c2.now += dt
                history.append(f"+{dt}s")
                continue
            a, b = mine.allow(), ref.allow()
            history.append("allow")
            expect(
                a == b,
                f"random run {trial} (threshold {threshold}, cooldown {cooldown}): after "
                f"{history}, allow() returned {a}, the reference {b}.",
            )
            if a:
                ok = rng.random() < 0.4
                (mine.record_success if ok else mine.record_failure)()
                (ref.record_success if ok else ref.record_failure)()
                history.append("success" if ok else "failure")
            expect(
                mine.state == ref.state,
                f"random run {trial}: after {history} the state is {mine.state!r}, the "
                f"reference's {ref.state!r}.",
            )
    passed("circuit breaker")
