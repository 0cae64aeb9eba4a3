"""The blobs exercise 1's check hands the learner's decode, and what it says when decode gets
one wrong: valid blobs at the edges of the format, blobs whose header CRC is valid but whose
contents are not (each one isolates one check), and blobs with two things wrong (which
reason comes first).

The library's `decode_blob` is the judge: a bad blob must be refused with its reason.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from dataclasses import dataclass
from math import prod

from paged_kv.errors import CorruptBlock
from paged_kv.tiers.codec import (
    DTYPES,
    FORMAT_VERSION,
    HEADER_SIZE,
    MAX_DIMS,
    decode_blob,
    encode_blob,
)

FIELDS = struct.Struct(f"<4sHBB{MAX_DIMS}I32s32sQI")
FP = hashlib.sha256(b"the learner's model").digest()
OTHER_FP = hashlib.sha256(b"someone else's model").digest()


def block_hash(i: int) -> bytes:
    return hashlib.sha256(f"block {i}".encode()).digest()


BH = block_hash(1)


def differing_at(digest: bytes, i: int) -> bytes:
    """`digest` with byte `i` changed: a comparison of only some bytes misses it."""
    return digest[:i] + bytes([digest[i] ^ 0x01]) + digest[i + 1 :]


def case(dtype: str, shape: tuple[int, ...], seed: int = 0, bh: bytes = BH) -> dict:
    """The keyword arguments of one encode: a payload of `shape` in `dtype`."""
    size = prod(shape) * DTYPES[dtype][1]
    payload = hashlib.shake_256(f"{seed} {shape}".encode()).digest(size) if size else b""
    return {"payload": payload, "dtype": dtype, "shape": shape, "fingerprint": FP, "block_hash": bh}


def craft(base: dict | None = None, *, payload: bytes | None = None, **fields: object) -> bytes:
    """A blob of `base` (a `case`) with some header `fields` replaced (magic, version, code,
    ndim, dims, fingerprint, block_hash, length, payload_crc), the header CRC made valid
    again, and `payload` (default: the case's) after it."""
    base = base or case("float32", (2, 3))
    magic, version, code, ndim, *rest = FIELDS.unpack(encode_blob(**base)[: FIELDS.size])
    values = {
        "magic": magic,
        "version": version,
        "code": code,
        "ndim": ndim,
        "dims": tuple(rest[:MAX_DIMS]),
        **dict(zip(_TAIL, rest[MAX_DIMS:], strict=True)),
    }
    values.update(fields)
    packed = FIELDS.pack(
        values["magic"],
        values["version"],
        values["code"],
        values["ndim"],
        *values["dims"],
        values["fingerprint"],
        values["block_hash"],
        values["length"],
        values["payload_crc"],
    )
    body = base["payload"] if payload is None else payload
    return packed + struct.pack("<I", zlib.crc32(packed)) + body


_TAIL = ("fingerprint", "block_hash", "length", "payload_crc")


def flipped(blob: bytes, i: int, mask: int = 0x01) -> bytes:
    return blob[:i] + bytes([blob[i] ^ mask]) + blob[i + 1 :]


_FIELD_AT = [
    (4, "the magic"),
    (6, "the version"),
    (7, "the dtype code"),
    (8, "ndim"),
    (32, "the shape"),
    (64, "the fingerprint"),
    (96, "the block hash"),
    (104, "the payload length"),
    (108, "the payload CRC"),
    (112, "the header CRC"),
]


def field_at(i: int) -> str:
    return next((name for end, name in _FIELD_AT if i < end), "the payload")


def library_reason(blob: bytes, fingerprint: bytes | None, bh: bytes | None) -> str:
    try:
        decode_blob(blob, fingerprint=fingerprint, block_hash=bh)
    except CorruptBlock as err:
        return err.reason
    raise AssertionError("the check's bad blob is accepted by the library")  # a bug in the check


@dataclass(frozen=True)
class Bad:
    """A bad blob, what it is, and what a decode that accepts it (or raises something other
    than CorruptBlock on it) forgot."""

    blob: bytes
    what: str
    forgot: str
    fingerprint: bytes | None = FP
    block_hash: bytes | None = BH


_PLAIN = case("float32", (2, 3))
_LONGER = case("float32", (2, 3, 2), seed=1)
_VALID_CRC = "a blob whose header CRC is valid but whose"
_IMPOSSIBLE = (
    "refuse an impossible dtype or shape: a dtype code DTYPE_OF_CODE lacks, ndim outside "
    "1..MAX_DIMS, a non-zero unused shape slot, or prod(shape) * itemsize != the header's "
    "payload length"
)


def single_faults() -> list[Bad]:
    """One thing wrong with each, everything else right: each needs its own check."""
    fp_hint = "compare all 32 bytes of the header's fingerprint with the one asked for"
    bh_hint = "compare all 32 bytes of the header's block hash with the one asked for"
    short = "check len(blob) < HEADER_SIZE before unpacking anything"
    whole = encode_blob(**_PLAIN)
    return [
        *(
            Bad(whole[:cut], f"a blob cut to {cut} bytes (the header is {HEADER_SIZE})", short)
            for cut in (0, 50, HEADER_SIZE - 1)
        ),
        Bad(craft(magic=b"XKVB"), f"{_VALID_CRC} magic is b'XKVB'", "compare blob[:4] with MAGIC"),
        Bad(craft(magic=b"PKVb"), f"{_VALID_CRC} magic is b'PKVb'", "compare all of the magic"),
        *(
            Bad(craft(version=v), f"{_VALID_CRC} version is {v}", "compare it with FORMAT_VERSION")
            for v in (FORMAT_VERSION + 1, 0)
        ),
        *(
            Bad(
                craft(code=code),
                f"{_VALID_CRC} dtype code is {code}, which names no dtype",
                "look the code up with DTYPE_OF_CODE.get(code) and " + _IMPOSSIBLE,
            )
            for code in (0, max(c for c, _ in DTYPES.values()) + 1, 255)
        ),
        Bad(
            craft(case("float32", (1,)), ndim=0, dims=(0,) * MAX_DIMS),
            f"{_VALID_CRC} ndim is 0 (no dimensions, a payload of one float32)",
            "a shape has 1 to MAX_DIMS dimensions: " + _IMPOSSIBLE,
        ),
        *(
            Bad(
                craft(case("float32", (1, 1, 1, 1, 1, 2)), ndim=n),
                f"{_VALID_CRC} ndim is {n}, more than the {MAX_DIMS} shape slots",
                "a shape has 1 to MAX_DIMS dimensions: " + _IMPOSSIBLE,
            )
            for n in (MAX_DIMS + 1, 255)
        ),
        Bad(
            craft(dims=(2, 3, 0, 0, 5, 0)),
            f"{_VALID_CRC} ndim is 2 and unused shape slot 5 holds 5",
            "the MAX_DIMS - ndim unused shape slots must all be 0: " + _IMPOSSIBLE,
        ),
        Bad(
            craft(
                length=28,
                payload=_PLAIN["payload"] + b"\0" * 4,
                payload_crc=zlib.crc32(_PLAIN["payload"] + b"\0" * 4),
            ),
            f"{_VALID_CRC} float32 shape (2, 3) (24 bytes) comes with a payload length of 28 "
            "(and 28 payload bytes)",
            "prod(shape) * itemsize must equal the header's payload length: " + _IMPOSSIBLE,
        ),
        Bad(
            whole[:HEADER_SIZE],
            "a blob cut to its 112-byte header (its payload is 24 bytes)",
            "compare len(blob) - HEADER_SIZE with the header's payload length (shorter: "
            "'truncated', longer: 'length')",
        ),
        Bad(
            whole[:-1],
            "a blob one byte short",
            "compare the payload's length with the header's",
        ),
        Bad(
            whole + b"\0",
            "a blob with one byte too many",
            "the payload must be exactly the header's payload length",
        ),
        Bad(whole, "a blob written for another model's fingerprint", fp_hint, OTHER_FP),
        *(
            Bad(
                whole,
                f"a blob whose fingerprint differs from the one asked for only in byte {i}",
                fp_hint,
                differing_at(FP, i),
            )
            for i in (0, 31)
        ),
        Bad(whole, "a blob holding another block", bh_hint, FP, block_hash(99_999)),
        *(
            Bad(
                whole,
                f"a blob whose block hash differs from the one asked for only in byte {i}",
                bh_hint,
                FP,
                differing_at(BH, i),
            )
            for i in (0, 20, 31)
        ),
        Bad(
            flipped(whole, HEADER_SIZE + 5),
            "a blob with one bit flipped in its payload",
            "compare zlib.crc32(payload) with the header's payload CRC",
        ),
        Bad(
            flipped(whole, HEADER_SIZE - 1),
            "a blob whose stored header CRC (bytes 108-111) has one bit flipped",
            "compare zlib.crc32(blob[:108]) with the CRC stored in bytes 108-111",
        ),
    ]


def two_faults() -> list[Bad]:
    """Two things wrong with each: the reason says which check comes first."""
    whole = encode_blob(**_LONGER)
    return [
        Bad(
            craft(_LONGER, version=FORMAT_VERSION + 1, code=99),
            f"{_VALID_CRC} version is {FORMAT_VERSION + 1} and dtype code 99",
            "compare the version with FORMAT_VERSION",
        ),
        Bad(
            craft(_LONGER, length=52, payload=_LONGER["payload"]),
            f"{_VALID_CRC} float32 shape (2, 3, 2) (48 bytes) comes with a payload length of "
            "52 and a payload of 48 bytes",
            _IMPOSSIBLE,
        ),
        Bad(
            whole,
            "a blob written for another model (another fingerprint, and another block hash)",
            "compare the fingerprint with the one asked for",
            OTHER_FP,
            block_hash(7),
        ),
        Bad(
            flipped(whole, HEADER_SIZE),
            "a blob holding another block, with a bit flipped in its payload",
            "compare the block hash with the one asked for",
            FP,
            block_hash(7),
        ),
        *(
            Bad(
                flipped(whole, i, mask),
                f"byte {i} ({field_at(i)}) xor {mask:#04x}",
                "check the magic, then the header CRC (over the first 108 bytes), the version, "
                "the dtype and shape against the payload length, the lengths, and the payload CRC",
            )
            for i in range(len(whole))
            for mask in (0x01, 0x80, 0xFF)
        ),
    ]


# -- the reasons, in the order decode checks them ---------------------------------------------

REASONS = {
    "truncated": "the blob is shorter than HEADER_SIZE, or its payload shorter than the "
    "header's payload length",
    "bad magic": "the first 4 bytes are not MAGIC",
    "header checksum": "zlib.crc32(blob[:108]) is not the CRC stored in bytes 108-111",
    "version": "the version is not FORMAT_VERSION",
    "bad header": "an impossible dtype or shape",
    "length": "the payload is longer than the header's payload length",
    "foreign fingerprint": "the header's fingerprint is not the one asked for",
    "foreign block": "the header's block hash is not the one asked for",
    "payload checksum": "zlib.crc32(payload) is not the header's payload CRC",
}
_FIRST = {
    "bad magic": "a value another program wrote under our key fails the other checks too, "
    "and 'bad magic' is the one that says what it is",
    "header checksum": "no field the CRC covers (version, dtype, shape, lengths, hashes) can be "
    "trusted until it matches: a flipped bit in one of them is damage, not another version "
    "or an odd shape",
    "version": "a blob of another format version may code its dtype and shape differently",
    "bad header": "the header must agree with itself before its payload length is compared "
    "with the blob's",
    "foreign fingerprint": "another model's block is not ours, whatever else differs",
    "foreign block": "a blob under the wrong key is not ours, whatever its payload",
}


def _step(reason: str, blob: bytes) -> int:
    if reason == "truncated" and len(blob) >= HEADER_SIZE:
        return list(REASONS).index("length")  # the payload is short, not the header
    return list(REASONS).index(reason)


def reason_advice(got: object, want: str, blob: bytes) -> str:
    """What to change when decode refused `blob` with reason `got` instead of `want`."""
    if not isinstance(got, str) or got not in REASONS:
        return (
            f"pass the reason: raise CorruptBlock(message, reason={want!r}) ({REASONS[want]}); "
            f"the reasons are {', '.join(map(repr, REASONS))}"
        )
    if {got, want} == {"truncated", "length"}:
        return (
            "a payload shorter than the header's payload length is 'truncated', a longer one "
            "'length'"
        )
    if _step(got, blob) > _step(want, blob):
        why = _FIRST.get(want, "decode raises at the first check that fails, in the listed order")
        return f"check {want!r} ({REASONS[want]}) before {got!r}: {why}"
    return (
        f"this blob passes the {got!r} check; what is wrong with it is {want!r} ({REASONS[want]})"
    )
