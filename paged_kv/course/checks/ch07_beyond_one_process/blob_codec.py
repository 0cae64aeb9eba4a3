"""Exercise 1 of chapter 07: the learner's blob codec writes the chapter's format byte for
byte, decodes every valid blob (an empty payload, six dimensions, "accept any" included), and
refuses every bad one with CorruptBlock and the library's reason."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import fields
from typing import Any

from paged_kv.course.checks.ch07_beyond_one_process.blobs import (
    BH,
    FP,
    Bad,
    block_hash,
    case,
    library_reason,
    reason_advice,
    single_faults,
    two_faults,
)
from paged_kv.course.checks.failures import (
    CheckFailed,
    call,
    exercise,
    expect,
    passed,
    short_repr,
    where_raised,
)
from paged_kv.errors import CorruptBlock
from paged_kv.tiers.codec import DTYPES, BlobHeader, decode_blob, encode_blob

_EMPTY = (
    "a dimension may be 0: then the payload is empty and the blob is the 112-byte header "
    "alone; a blob is too short only when len(blob) < HEADER_SIZE"
)
_SIX = "a shape may have up to MAX_DIMS = 6 dimensions, 6 included: 1 <= ndim <= MAX_DIMS"
_ANY = (
    "None for the fingerprint or the block hash means 'accept any': compare only when the "
    "caller passes one (if fingerprint is not None and ...)"
)
_VALID = "a blob encode made passes every check: the reason names the one of yours that refused it"
# (case, fingerprint asked for, block hash asked for, what to do if it is refused)
_EDGES = [
    (case("float32", (0,)), FP, BH, _EMPTY),
    (case("int8", (2, 0, 3)), FP, BH, _EMPTY),
    (case("float16", (1, 2, 1, 2, 1, 2), seed=3), FP, BH, _SIX),
    (case("bfloat16", (3,), seed=4), FP, BH, _VALID),
    (case("float32", (2, 3), seed=5), None, None, _ANY),
    (case("int16", (2, 2), seed=6), None, BH, _ANY),
    (case("uint8", (5,), seed=7, bh=block_hash(8)), FP, None, _ANY),
]


def _random_case(rng: random.Random) -> dict[str, Any]:
    shape = tuple(rng.randint(1, 3) for _ in range(rng.randint(1, 6)))
    return case(rng.choice(sorted(DTYPES)), shape, seed=rng.randrange(10**6))


def _note(c: dict[str, Any]) -> str:
    return _SIX if len(c["shape"]) == 6 else _EMPTY if 0 in c["shape"] else _VALID


@exercise(1, "encode, decode")
def check_blob_codec(encode: Callable[..., bytes], decode: Callable[..., Any]) -> None:
    """`encode(payload, dtype=, shape=, fingerprint=, block_hash=)` writes the chapter's blob
    format; `decode(blob, fingerprint=, block_hash=)` returns (header, payload) and raises
    CorruptBlock(message, reason=...) for anything damaged or foreign, with the library's
    reason."""
    rng = random.Random(7)
    cases = [case("float32", (2, 3))] + [_random_case(rng) for _ in range(20)]
    for c in cases + [edge[0] for edge in _EDGES]:
        _check_encode(encode, c)
    plain = [(c, FP, c["block_hash"], _note(c)) for c in cases]
    for c, fingerprint, bh, note in plain[:1] + _EDGES + plain[1:]:
        _check_decode(decode, c, fingerprint, bh, note)
    for bad in single_faults() + two_faults():
        _expect_refused(decode, bad)
    passed("the chapter's blob format; every damaged or foreign blob refused, with its reason")


def _check_encode(encode: Callable[..., bytes], c: dict[str, Any]) -> None:
    doing = (
        f"encode(<{len(c['payload'])} bytes>, dtype={c['dtype']!r}, shape={c['shape']}, "
        "fingerprint=<32 bytes>, block_hash=<32 bytes>)"
    )
    blob = call(
        doing,
        encode,
        c["payload"],
        dtype=c["dtype"],
        shape=c["shape"],
        fingerprint=c["fingerprint"],
        block_hash=c["block_hash"],
    )
    expect(
        isinstance(blob, bytes | bytearray),
        f"{doing}: encode must return bytes, got {type(blob).__name__}.",
    )
    want = encode_blob(**c)
    expect(
        bytes(blob[:4]) == b"PKVB",
        f"{doing}: a blob starts with the magic b'PKVB' (struct format '4s', first field), "
        f"yours with {bytes(blob[:4])!r}.",
    )
    expect(
        len(blob) == len(want),
        f"a {c['dtype']} payload of shape {c['shape']} makes a blob of {len(want)} bytes "
        f"(112-byte header + payload), yours has {len(blob)}.",
    )
    expect(
        bytes(blob) == want,
        f"{doing}: your blob differs from the chapter's format: pack FIELDS with magic, "
        "version, dtype code, ndim, the shape padded with zeros to 6 dims, fingerprint, block "
        "hash, payload length and zlib.crc32(payload); then CRC.pack(zlib.crc32(fields)); "
        "then the payload.",
    )


def _check_decode(
    decode: Callable[..., Any],
    c: dict[str, Any],
    fingerprint: bytes | None,
    bh: bytes | None,
    note: str,
) -> None:
    blob = encode_blob(**c)
    want, _ = decode_blob(blob, fingerprint=None, block_hash=None)
    asked = " and ".join(
        [
            "its own fingerprint" if fingerprint else "fingerprint=None",
            "its own block hash" if bh else "block_hash=None",
        ]
    )
    what = f"a valid {len(blob)}-byte blob of {c['dtype']} {c['shape']}, asked for {asked}"
    try:
        result = decode(blob, fingerprint=fingerprint, block_hash=bh)
    except CorruptBlock as exc:
        raise CheckFailed(
            f"decode refused {what} (reason={getattr(exc, 'reason', None)!r}: {exc}); {note}."
        ) from None
    except (CheckFailed, NotImplementedError):
        raise
    except Exception as exc:
        raise CheckFailed(
            f"decoding {what}, your decode raised {type(exc).__name__}: {exc} "
            f"({_where(exc)}); a valid blob decodes to (header, payload)."
        ) from None
    expect(
        isinstance(result, tuple | list) and len(result) == 2,
        f"decoding {what}: decode must return the pair (header, payload), got "
        f"{short_repr(result)}.",
    )
    header, payload = result
    expect(
        not (_is_bytes(header) and not _is_bytes(payload)),
        "decode returned (payload, header): return (header, payload), the BlobHeader first, "
        "like decode_blob, so that `header, payload = decode(...)` works.",
    )
    for field in fields(BlobHeader):
        mine = getattr(header, field.name, _MISSING)
        expect(
            mine is not _MISSING,
            f"the header decode returns must be a BlobHeader(version, dtype, shape, "
            f"fingerprint, block_hash, payload_length, payload_checksum); yours, a "
            f"{type(header).__name__}, has no .{field.name}.",
        )
        theirs = getattr(want, field.name)
        expect(
            mine == theirs,
            f"decoding {what}: header.{field.name} is {short_repr(mine)}, the blob holds "
            f"{short_repr(theirs)}"
            + (" (a tuple of the first ndim dims)." if field.name == "shape" else "."),
        )
    try:
        data = bytes(payload)
    except TypeError:
        raise CheckFailed(
            f"the payload decode returns must be bytes (or a memoryview of the blob), got a "
            f"{type(payload).__name__}."
        ) from None
    expect(
        data == c["payload"],
        f"decoding {what}: the payload must be the {len(c['payload'])} bytes after the "
        f"header (blob[HEADER_SIZE:]), unchanged; yours has {len(data)} bytes"
        + (", other ones." if len(data) == len(c["payload"]) else "."),
    )


_MISSING = object()


def _is_bytes(value: object) -> bool:
    return isinstance(value, bytes | bytearray | memoryview)


def _where(exc: BaseException) -> str:
    return where_raised(exc).strip() or "inside the library"


def _expect_refused(decode: Callable[..., Any], bad: Bad) -> None:
    want = library_reason(bad.blob, bad.fingerprint, bad.block_hash)
    try:
        decode(bad.blob, fingerprint=bad.fingerprint, block_hash=bad.block_hash)
    except CorruptBlock as exc:
        got = getattr(exc, "reason", None)
        if got != want:
            raise CheckFailed(
                f"{bad.what}: your decode refused it with reason={got!r}, the library with "
                f"reason={want!r}; {reason_advice(got, want, bad.blob)}."
            ) from None
        return
    except (CheckFailed, NotImplementedError):
        raise
    except Exception as exc:
        if type(exc).__name__ == "CorruptBlock":
            raise CheckFailed(
                f"{bad.what}: your decode raised a CorruptBlock of its own ({_where(exc)}); "
                "import the chapter's: from paged_kv.errors import CorruptBlock."
            ) from None
        raise CheckFailed(
            f"{bad.what}: your decode raised {type(exc).__name__}: {exc} ({_where(exc)}), not "
            f"CorruptBlock; {bad.forgot}, and raise CorruptBlock(message, reason={want!r}), "
            "which the store counts, deletes and treats as a miss."
        ) from None
    raise CheckFailed(
        f"{bad.what} was accepted: {bad.forgot}, and raise CorruptBlock(message, reason={want!r})."
    )
