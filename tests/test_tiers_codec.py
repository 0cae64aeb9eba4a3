"""The blob codec, keys and fingerprints (acceptance test 1 and the unit tests around it)."""

from __future__ import annotations

import hashlib
import struct
import zlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from paged_kv.errors import CorruptBlock, InvalidArgument
from paged_kv.tiers import (
    DTYPES,
    HEADER_SIZE,
    KeySpace,
    ModelFingerprint,
    decode_blob,
    encode_blob,
    read_header,
)
from paged_kv.tiers.codec import parse_key

FP = hashlib.sha256(b"model").digest()
OTHER_FP = hashlib.sha256(b"another model").digest()
HASH = hashlib.sha256(b"block 0").digest()


def tensor_of(dtype: torch.dtype, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    """Random values that exercise every bit pattern the dtype has (NaNs included)."""
    g = torch.Generator().manual_seed(seed)
    size = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (*shape[:-1], shape[-1] * size), generator=g, dtype=torch.uint8)
    return raw.view(dtype)


def encode_tensor(t: torch.Tensor, fingerprint: bytes = FP, block_hash: bytes = HASH) -> bytes:
    name = str(t.dtype).removeprefix("torch.")
    payload = t.contiguous().view(torch.uint8).numpy().tobytes()
    return encode_blob(
        payload, dtype=name, shape=t.shape, fingerprint=fingerprint, block_hash=block_hash
    )


def decode_tensor(blob: bytes, fingerprint: bytes = FP, block_hash: bytes = HASH) -> torch.Tensor:
    header, payload = decode_blob(blob, fingerprint=fingerprint, block_hash=block_hash)
    raw = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    return raw.view(getattr(torch, header.dtype)).view(header.shape)


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_acceptance_1_every_dtype_round_trips_bit_for_bit(name):
    dtype = getattr(torch, name)
    t = tensor_of(dtype, (2, 2, 4, 2, 8))
    blob = encode_tensor(t)
    assert len(blob) == HEADER_SIZE + t.numel() * t.element_size()
    back = decode_tensor(blob)
    assert back.dtype == dtype and back.shape == t.shape
    assert torch.equal(back.view(torch.uint8), t.view(torch.uint8))  # bits, NaNs included


def test_acceptance_1_every_flipped_byte_and_bit_is_rejected():
    blob = encode_tensor(tensor_of(torch.float16, (1, 2, 2, 1, 4)))
    for i in range(len(blob)):
        for flip in (0xFF, 1 << (i % 8)):
            damaged = bytearray(blob)
            damaged[i] ^= flip
            with pytest.raises(CorruptBlock):
                decode_blob(bytes(damaged), fingerprint=FP, block_hash=HASH)


def test_acceptance_1_every_truncation_and_extension_is_rejected():
    blob = encode_tensor(tensor_of(torch.bfloat16, (1, 2, 3, 1, 4)))
    for cut in range(len(blob)):
        with pytest.raises(CorruptBlock) as err:
            decode_blob(blob[:cut], fingerprint=FP, block_hash=HASH)
        assert err.value.reason in ("truncated", "bad header")
    with pytest.raises(CorruptBlock, match="padded"):
        decode_blob(blob + b"\0", fingerprint=FP, block_hash=HASH)


def test_acceptance_1_a_foreign_fingerprint_or_block_is_rejected():
    blob = encode_tensor(tensor_of(torch.float32, (2, 2)))
    with pytest.raises(CorruptBlock) as err:
        decode_blob(blob, fingerprint=OTHER_FP, block_hash=HASH)
    assert err.value.reason == "foreign fingerprint"
    with pytest.raises(CorruptBlock) as err:
        decode_blob(blob, fingerprint=FP, block_hash=hashlib.sha256(b"block 1").digest())
    assert err.value.reason == "foreign block"
    decode_blob(blob, fingerprint=None, block_hash=None)  # integrity alone still holds


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(DTYPES)),
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=6),
    seed=st.integers(0, 2**16),
    position=st.integers(0, 10_000),
    bit=st.integers(0, 7),
)
def test_random_blobs_round_trip_and_any_bit_flip_is_caught(name, shape, seed, position, bit):
    t = tensor_of(getattr(torch, name), tuple(shape), seed)
    blob = encode_tensor(t)
    assert torch.equal(decode_tensor(blob).view(torch.uint8), t.view(torch.uint8))
    damaged = bytearray(blob)
    damaged[position % len(blob)] ^= 1 << bit
    with pytest.raises(CorruptBlock):
        decode_blob(bytes(damaged), fingerprint=FP, block_hash=HASH)


def test_header_layout_is_fixed_and_checked_field_by_field():
    blob = encode_tensor(tensor_of(torch.int8, (3, 5)))
    assert blob[:4] == b"PKVB" and HEADER_SIZE == 112
    header = read_header(blob)
    assert (header.version, header.dtype, header.shape) == (1, "int8", (3, 5))
    assert header.fingerprint == FP and header.block_hash == HASH
    assert header.payload_length == 15 and header.payload_checksum == zlib.crc32(blob[112:])
    # A header whose own checksum is re-computed but whose version is unknown: "version".
    fields = bytearray(blob[:108])
    struct.pack_into("<H", fields, 4, 99)
    forged = bytes(fields) + struct.pack("<I", zlib.crc32(fields)) + blob[112:]
    with pytest.raises(CorruptBlock) as err:
        decode_blob(forged, fingerprint=FP, block_hash=HASH)
    assert err.value.reason == "version"
    with pytest.raises(CorruptBlock, match="not a paged_kv block"):
        decode_blob(b"GIF89a" + blob[6:], fingerprint=FP, block_hash=HASH)


def test_encode_refuses_bad_arguments_with_what_to_do():
    with pytest.raises(InvalidArgument, match="storable"):
        encode_blob(b"ab", dtype="complex64", shape=(1,), fingerprint=FP, block_hash=HASH)
    with pytest.raises(InvalidArgument, match=r"tensor\.contiguous"):
        encode_blob(b"abc", dtype="float32", shape=(1,), fingerprint=FP, block_hash=HASH)
    with pytest.raises(InvalidArgument, match="32 bytes"):
        encode_blob(b"a", dtype="int8", shape=(1,), fingerprint=b"short", block_hash=HASH)
    with pytest.raises(InvalidArgument, match="dimensions"):
        encode_blob(b"a", dtype="int8", shape=(1,) * 7, fingerprint=FP, block_hash=HASH)


def fingerprint(**change) -> ModelFingerprint:
    fields = dict(
        model_id="TinyLM",
        weights_digest="ab" * 32,
        dtype="float32",
        num_layers=2,
        num_kv_heads=2,
        head_dim=16,
        block_size=16,
    )
    return ModelFingerprint(**{**fields, **change})


@pytest.mark.parametrize(
    "change",
    [
        {"model_id": "Other"},
        {"weights_digest": "cd" * 32},
        {"dtype": "bfloat16"},
        {"num_layers": 3},
        {"num_kv_heads": 1},
        {"head_dim": 8},
        {"block_size": 8},
        {"layout": "tokens,kv_heads,head_dim"},
        {"format_version": 2},
    ],
    ids=lambda c: next(iter(c)),
)
def test_every_fingerprint_field_changes_the_digest_and_the_keys(change):
    base, other = fingerprint(), fingerprint(**change)
    assert base.digest() != other.digest()
    assert KeySpace("ns", base).key(HASH) != KeySpace("ns", other).key(HASH)


def test_keys_name_namespace_fingerprint_and_block_and_are_stable():
    space = KeySpace("prod.eu-1", fingerprint())
    key = space.key(HASH)
    namespace, fp_hex, hash_hex = parse_key(key)
    assert namespace == "prod.eu-1" and hash_hex == HASH.hex()
    assert fp_hex == fingerprint().digest().hex()[:32]
    assert KeySpace("other", fingerprint()).key(HASH) != key
    assert space.keys([HASH, HASH]) == [key, key]
    # Pinned: a change of encoding would silently orphan every stored block.
    assert fingerprint().digest().hex()[:16] == KNOWN_FINGERPRINT_PREFIX


KNOWN_FINGERPRINT_PREFIX = "7b7af077f241e8a7"


def test_bad_namespaces_and_keys_are_refused():
    for bad in ("", "a b", "x:y", "a/b", "n" * 65, 5):
        with pytest.raises(InvalidArgument, match="namespace"):
            KeySpace(bad, fingerprint())
    with pytest.raises(InvalidArgument, match="not a block key"):
        parse_key("ns:xyz:123")
    with pytest.raises(InvalidArgument, match="ModelFingerprint"):
        KeySpace("ns", "not a fingerprint")
    with pytest.raises(InvalidArgument, match="weights digest"):
        fingerprint(weights_digest="")
