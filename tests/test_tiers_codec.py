"""The blob codec, keys and fingerprints (acceptance test 1 and the unit tests around it)."""

from __future__ import annotations

import hashlib
import hmac
import struct
import zlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_tiers_base import MUTANTS_SPACE, TOY_FP

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
from paged_kv.tiers.codec import TAG_SIZE, check_integrity, parse_key

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
    assert (header.version, header.dtype, header.shape) == (2, "int8", (3, 5))
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
        {"format_version": 3},
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


KNOWN_FINGERPRINT_PREFIX = "fb4473f9007be9c1"  # format version 2


def test_bad_namespaces_and_keys_are_refused():
    for bad in ("", "a b", "x:y", "a/b", "n" * 65, 5, ".", "..", "ns\n", "\nns", None):
        with pytest.raises(InvalidArgument, match="namespace"):
            KeySpace(bad, fingerprint())
    with pytest.raises(InvalidArgument, match="not a block key"):
        parse_key("ns:xyz:123")
    good = KeySpace("ns", fingerprint()).key(HASH)
    for bad_key in (good + "\n", "..:" + good.split(":", 1)[1], 5, None):
        with pytest.raises(InvalidArgument, match="not a block key"):
            parse_key(bad_key)
    with pytest.raises(InvalidArgument, match="ModelFingerprint"):
        KeySpace("ns", "not a fingerprint")
    with pytest.raises(InvalidArgument, match="weights digest"):
        fingerprint(weights_digest="")


# -- hostile arguments -------------------------------------------------------------------------


def encode_args(**change) -> dict:
    args = dict(payload=b"\x01" * 4, dtype="float32", shape=(1,), fingerprint=FP, block_hash=HASH)
    return {**args, **change}


@pytest.mark.parametrize(
    "payload", ["abcd", None, 1234, [1, 2, 3, 4]], ids=["str", "none", "int", "list"]
)
def test_encode_refuses_a_payload_that_is_not_bytes(payload):
    with pytest.raises(InvalidArgument, match="payload must be bytes"):
        encode_blob(**encode_args(payload=payload))


def test_encode_refuses_a_payload_that_is_not_one_run_of_bytes():
    strided = memoryview(bytes(range(8)))[::2]
    with pytest.raises(InvalidArgument, match="contiguous"):
        encode_blob(**encode_args(payload=strided))
    flat = memoryview(b"\x01" * 4).cast("I")  # a typed view is taken as its raw bytes
    assert decode_blob(encode_blob(**encode_args(payload=flat)), fingerprint=FP, block_hash=HASH)


@pytest.mark.parametrize(
    "blob", [None, "PKVB", 12, bytearray(3)], ids=["none", "str", "int", "short"]
)
def test_decode_refuses_what_is_not_a_blob_with_a_typed_error(blob):
    error = CorruptBlock if isinstance(blob, bytearray) else InvalidArgument
    with pytest.raises(error):
        decode_blob(blob, fingerprint=FP, block_hash=HASH)
    with pytest.raises(error):
        read_header(blob)


def test_a_dimension_of_2_to_the_32_is_refused_and_one_below_it_is_not():
    with pytest.raises(InvalidArgument, match=r"each below 2\*\*32"):
        encode_blob(**encode_args(dtype="int8", shape=(2**32,)))
    with pytest.raises(InvalidArgument, match=r"tensor\.contiguous"):  # the size, not the dims
        encode_blob(**encode_args(dtype="int8", shape=(2**32 - 1,)))
    with pytest.raises(InvalidArgument, match="shape dimension"):
        encode_blob(**encode_args(dtype="int8", shape=(-1,)))


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_payload_bytes_is_the_shape_times_the_item_size(name):
    fp = fingerprint(dtype=name, num_layers=3, num_kv_heads=2, head_dim=5, block_size=4)
    itemsize = torch.empty((), dtype=getattr(torch, name)).element_size()
    assert fp.payload_shape == (3, 2, 4, 2, 5)
    assert fp.payload_bytes == 3 * 2 * 4 * 2 * 5 * itemsize


# -- authenticated blobs ---------------------------------------------------------------------

SECRET = b"deployment secret of 32 bytes!!!"


def test_an_authenticated_blob_round_trips_with_its_secret_only():
    t = tensor_of(torch.float16, (2, 2, 4, 2, 8))
    plain = encode_tensor(t)
    name = str(t.dtype).removeprefix("torch.")
    raw = t.view(torch.uint8).numpy().tobytes()
    blob = encode_blob(
        raw, dtype=name, shape=t.shape, fingerprint=FP, block_hash=HASH, secret=SECRET
    )
    assert len(blob) == len(plain) + TAG_SIZE and blob[: len(plain)] == plain
    assert blob[len(plain) :] == hmac.new(SECRET, plain, hashlib.sha256).digest()
    header, payload = decode_blob(blob, fingerprint=FP, block_hash=HASH, secret=SECRET)
    assert bytes(payload) == raw and header.payload_length == len(raw)
    for reader, reason in (
        (None, "authenticated"),
        (b"another secret, 32 bytes long!!!", "authentication"),
    ):
        with pytest.raises(CorruptBlock) as err:
            decode_blob(blob, fingerprint=FP, block_hash=HASH, secret=reader)
        assert err.value.reason == reason
    assert check_integrity(blob) == check_integrity(plain) == header


def forged(payload: bytes, *, tag: bytes = b"") -> bytes:
    """What a writer without the secret can make: a valid header (CRC-32 and all) for the
    right fingerprint and block hash around its own payload."""
    return (
        encode_blob(payload, dtype="int8", shape=(len(payload),), fingerprint=FP, block_hash=HASH)
        + tag
    )


def test_with_a_secret_a_forged_blob_with_valid_checksums_is_refused():
    genuine = encode_blob(
        b"good", dtype="int8", shape=(4,), fingerprint=FP, block_hash=HASH, secret=SECRET
    )
    decode_blob(forged(b"evil"), fingerprint=FP, block_hash=HASH)  # what CRC-32 alone lets through
    cases = {
        "unauthenticated": forged(b"evil"),
        "authentication": forged(b"evil", tag=b"\0" * TAG_SIZE),
    }
    cases["authentication "] = forged(b"evil", tag=genuine[-TAG_SIZE:])  # a tag copied over
    for reason, blob in cases.items():
        with pytest.raises(CorruptBlock) as err:
            decode_blob(blob, fingerprint=FP, block_hash=HASH, secret=SECRET)
        assert err.value.reason == reason.strip()
    for cut in (1, TAG_SIZE - 1, TAG_SIZE + 1):  # a torn tag is damage, not a missing tag
        with pytest.raises(CorruptBlock) as err:
            decode_blob(genuine[:-cut], fingerprint=FP, block_hash=HASH, secret=SECRET)
        assert err.value.reason in ("truncated", "length")


def test_every_flipped_bit_of_an_authenticated_blob_is_refused():
    blob = encode_blob(
        b"\x07" * 8, dtype="int8", shape=(8,), fingerprint=FP, block_hash=HASH, secret=SECRET
    )
    for i in range(len(blob)):
        damaged = bytearray(blob)
        damaged[i] ^= 1 << (i % 8)
        with pytest.raises(CorruptBlock):
            decode_blob(bytes(damaged), fingerprint=FP, block_hash=HASH, secret=SECRET)


@pytest.mark.parametrize("secret", [b"short", "a text secret of many bytes", b"", 16], ids=repr)
def test_a_secret_is_at_least_16_bytes(secret):
    with pytest.raises(InvalidArgument, match="at least 16"):
        encode_blob(**encode_args(secret=secret))
    with pytest.raises(InvalidArgument, match="at least 16"):
        decode_blob(forged(b"x"), fingerprint=FP, block_hash=HASH, secret=secret)


def test_a_version_1_blob_is_refused_as_another_version():
    blob = bytearray(forged(b"old!"))
    struct.pack_into("<H", blob, 4, 1)
    struct.pack_into("<I", blob, 108, zlib.crc32(blob[:108]))
    with pytest.raises(CorruptBlock) as err:
        decode_blob(bytes(blob), fingerprint=FP, block_hash=HASH)
    assert err.value.reason == "version"
    with pytest.raises(CorruptBlock):
        check_integrity(bytes(blob))


# Behaviours that mutation testing (tools/mutation_test.py) found no test pinning, in the tiers:
# each test here kills at least one mutant that survived every other test of its module.


@pytest.mark.parametrize("field", ["num_layers", "num_kv_heads", "head_dim", "block_size"])
@pytest.mark.parametrize("bad", [0, -2, 1.5])
def test_a_fingerprint_refuses_sizes_that_are_not_positive_ints(field, bad):
    """A fingerprint names the payload's shape; a zero or fractional size names none."""
    from paged_kv.errors import InvalidArgument

    sizes = {"num_layers": 1, "num_kv_heads": 1, "head_dim": 2, "block_size": 2, field: bad}
    with pytest.raises(InvalidArgument, match=field):
        ModelFingerprint("toy", "ab" * 32, "float32", **sizes)


def toy_payloads(n: int) -> list[bytes]:
    return [torch.full(TOY_FP.payload_shape, float(i)).numpy().tobytes() for i in range(n)]


@pytest.mark.parametrize(
    "block_hash",
    [b"\x01" * 31, b"\x01" * 33, b"", "ab" * 16, None],
    ids=["31-bytes", "33-bytes", "empty", "hex-text", "none"],
)
def test_encoding_refuses_a_block_hash_that_is_not_a_32_byte_digest(block_hash):
    """A short hash would be padded with zeros and a long one cut, silently naming another
    block in the header; anything else is refused with what to pass."""
    from paged_kv.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="block_hash must be 32 bytes"):
        encode_blob(
            toy_payloads(1)[0],
            dtype="float32",
            shape=TOY_FP.payload_shape,
            fingerprint=MUTANTS_SPACE.fingerprint_digest,
            block_hash=block_hash,
        )


@pytest.mark.parametrize("secret", [None, SECRET], ids=["plain", "authenticated"])
def test_max_blob_bytes_bounds_every_blob_of_the_fingerprint(secret):
    """A tier reads no more than `max_blob_bytes` of a value: the authenticated blob, the
    larger of the two layouts, is exactly that long."""
    blob = encode_blob(
        bytes(TOY_FP.payload_bytes), dtype=TOY_FP.dtype, shape=TOY_FP.payload_shape,
        fingerprint=TOY_FP.digest(), block_hash=FP, secret=secret,
    )  # fmt: skip
    assert len(blob) == TOY_FP.max_blob_bytes - (TAG_SIZE if secret is None else 0)
