"""One self-verifying blob per KV block: a fixed header, then the raw bytes of the block.

A lower tier stores a block's K/V as one value (never separate data and metadata keys, which
a crash or an eviction can separate). The header says what the bytes are and proves they are
whole and meant for this model and this prefix:

    magic "PKVB" · format version · dtype · shape (up to 6 dims) · model fingerprint (32 bytes)
    · the block's chained hash (32 bytes) · payload length · payload CRC-32 · header CRC-32

`decode_blob` checks all of it before anyone uses the bytes and raises `CorruptBlock` with
the reason. CRC-32 catches every single-bit flip and every burst up to 32 bits; it is a check
against accidents (torn writes, bit rot, a foreign writer), not a signature: anyone who can
write to the store and knows the model's fingerprint and a prompt can make a valid header.

Authenticated blobs (opt-in): with a deployment secret, `encode_blob` appends a 32-byte
HMAC-SHA256 tag over header and payload, and `decode_blob` given the same secret refuses a
blob whose tag is missing or wrong ("unauthenticated", "authentication") before it looks at
anything else the header claims. Whether a tag is required is the reader's configuration,
never a flag in the blob (a forger would clear it). Without a secret the layout is exactly
the plain one above, and a tagged blob is refused ("authenticated": give the secret).
Torch-free on purpose: a writer process or a tool can use it without importing torch.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import struct
import zlib
from collections.abc import Sequence
from dataclasses import astuple, dataclass
from functools import cached_property
from math import prod
from typing import TypeGuard

from paged_kv.errors import CorruptBlock, InvalidArgument
from paged_kv.validation import require_int, require_positive_int

MAGIC = b"PKVB"
# 2: blobs may carry an HMAC-SHA256 tag after the payload. A version-1 blob reads as a miss
# (refused as "version"; its keys differ too, since the fingerprint names the version).
FORMAT_VERSION = 2
MAX_DIMS = 6
# magic, version, dtype code, ndim, shape[6], fingerprint, block hash, payload length, payload crc
_FIELDS = struct.Struct(f"<4sHBB{MAX_DIMS}I32s32sQI")
_CRC = struct.Struct("<I")
HEADER_SIZE = _FIELDS.size + _CRC.size  # 112 bytes
TAG_SIZE = hashlib.sha256().digest_size  # the HMAC-SHA256 tag of an authenticated blob
MIN_SECRET_BYTES = 16
# The most bytes a tier reads for one blob when no fingerprint bounds it (a sparse file or a
# planted value claims any size); a store reads at most its fingerprint's `max_blob_bytes`.
MAX_BLOB_BYTES = 1 << 30

# dtype name -> (code written in the header, bytes per element). Codes never change meaning.
DTYPES: dict[str, tuple[int, int]] = {
    "float32": (1, 4),
    "float16": (2, 2),
    "bfloat16": (3, 2),
    "float64": (4, 8),
    "float8_e4m3fn": (5, 1),
    "float8_e5m2": (6, 1),
    "int8": (7, 1),
    "uint8": (8, 1),
    "int16": (9, 2),
    "int32": (10, 4),
    "int64": (11, 8),
}
_DTYPE_OF_CODE = {code: name for name, (code, _) in DTYPES.items()}

# Payload layout of a block: [layers, (K, V), tokens, KV heads, head dim], row-major.
LAYOUT = "layers,kv,tokens,kv_heads,head_dim"


@dataclass(frozen=True)
class BlobHeader:
    """What a blob's header says about its payload."""

    version: int
    dtype: str
    shape: tuple[int, ...]
    fingerprint: bytes
    block_hash: bytes
    payload_length: int
    payload_checksum: int


def encode_blob(
    payload: bytes | bytearray | memoryview,
    *,
    dtype: str,
    shape: Sequence[int],
    fingerprint: bytes,
    block_hash: bytes,
    secret: bytes | None = None,
) -> bytes:
    """Header + payload as one bytes object. `payload` must hold exactly `shape` of `dtype`.
    With `secret` (see `check_secret`), an HMAC-SHA256 tag over both follows the payload."""
    data = _byte_view("payload", payload)
    code, itemsize = _dtype(dtype)
    dims = _shape(shape)
    _digest32("fingerprint", fingerprint)
    _digest32("block_hash", block_hash)
    key = None if secret is None else check_secret(secret)
    if len(data) != prod(dims) * itemsize:
        raise InvalidArgument(
            f"a {dtype} payload of shape {dims} is {prod(dims) * itemsize} bytes, got "
            f"{len(data)}; pass the block's raw bytes (tensor.contiguous() viewed as uint8)."
        )
    fields = _FIELDS.pack(
        MAGIC,
        FORMAT_VERSION,
        code,
        len(dims),
        *dims,
        *([0] * (MAX_DIMS - len(dims))),
        fingerprint,
        block_hash,
        len(data),
        zlib.crc32(data),
    )
    blob = b"".join((fields, _CRC.pack(zlib.crc32(fields)), data))
    return blob if key is None else blob + _tag(key, blob)


def read_header(blob: bytes | bytearray | memoryview) -> BlobHeader:
    """The verified header of `blob` (magic, header checksum, version, dtype, shape, length
    agree); the payload is not checked here. Raises `CorruptBlock`."""
    view = _byte_view("blob", blob)
    if len(view) < HEADER_SIZE:
        raise CorruptBlock(
            f"blob of {len(view)} bytes is shorter than the {HEADER_SIZE}-byte header "
            "(truncated write?); delete it and recompute the block.",
            reason="truncated",
        )
    fields = view[: _FIELDS.size]
    (stored_crc,) = _CRC.unpack_from(view, _FIELDS.size)
    magic, version, code, ndim, *rest = _FIELDS.unpack(fields)
    if magic != MAGIC:
        raise CorruptBlock(
            f"blob starts with {bytes(magic)!r}, not {MAGIC!r}: not a paged_kv block "
            "(another program's value under our key?); delete it.",
            reason="bad magic",
        )
    if zlib.crc32(fields) != stored_crc:
        raise CorruptBlock(
            "the blob's header checksum does not match (bytes flipped in the header); "
            "delete it and recompute the block.",
            reason="header checksum",
        )
    if version != FORMAT_VERSION:
        raise CorruptBlock(
            f"blob format version {version}, this reader knows {FORMAT_VERSION}; "
            "clear the store or use a matching paged_kv.",
            reason="version",
        )
    dims, (fingerprint, block_hash, length, payload_crc) = rest[:MAX_DIMS], rest[MAX_DIMS:]
    dtype = _DTYPE_OF_CODE.get(code)
    if dtype is None or not 1 <= ndim <= MAX_DIMS or any(dims[ndim:]):
        raise CorruptBlock(
            f"blob header names dtype code {code} with {ndim} dims, which no writer makes; "
            "delete it.",
            reason="bad header",
        )
    shape = tuple(dims[:ndim])
    if prod(shape) * DTYPES[dtype][1] != length:
        raise CorruptBlock(
            f"header says {length} payload bytes but {dtype} {shape} needs "
            f"{prod(shape) * DTYPES[dtype][1]}; delete it.",
            reason="bad header",
        )
    return BlobHeader(version, dtype, shape, fingerprint, block_hash, length, payload_crc)


def decode_blob(
    blob: bytes | bytearray | memoryview,
    *,
    fingerprint: bytes | None,
    block_hash: bytes | None,
    secret: bytes | None = None,
) -> tuple[BlobHeader, memoryview]:
    """Verify `blob` completely and return its header and payload (a view into `blob`).

    `fingerprint` and `block_hash` are what the caller expects (None: accept any, for tools
    that only check integrity). With `secret`, the blob must carry a valid HMAC tag, checked
    right after the header's own checksum. Raises `CorruptBlock` naming the first check that
    failed.
    """
    view = _byte_view("blob", blob)
    key = None if secret is None else check_secret(secret)
    header = read_header(view)
    end = HEADER_SIZE + header.payload_length
    if key is None and len(view) == end + TAG_SIZE:
        raise CorruptBlock(
            "the blob carries an authentication tag: read it with the secret its writer used "
            "(TieredStore(secret=...) or $PAGED_KV_BLOB_SECRET).",
            reason="authenticated",
        )
    if key is not None:
        if len(view) == end:
            raise CorruptBlock(
                "the blob carries no authentication tag while this reader requires one (a "
                "forgery, or a writer without the secret); it is not ours to use.",
                reason="unauthenticated",
            )
        if len(view) == end + TAG_SIZE:
            if not hmac.compare_digest(_tag(key, view[:end]), view[end:]):
                raise CorruptBlock(
                    "the blob's authentication tag does not match (forged, or written with "
                    "another secret); it is not ours to use.",
                    reason="authentication",
                )
            view = view[:end]
    _check_payload_length(header, len(view) - HEADER_SIZE)
    payload = view[HEADER_SIZE:]
    if fingerprint is not None and header.fingerprint != fingerprint:
        raise CorruptBlock(
            "the blob was written for another model or layout (fingerprint "
            f"{header.fingerprint.hex()[:12]}…, expected {fingerprint.hex()[:12]}…); "
            "it is not ours to use.",
            reason="foreign fingerprint",
        )
    if block_hash is not None and header.block_hash != block_hash:
        raise CorruptBlock(
            f"the blob holds block {header.block_hash.hex()[:12]}…, not the "
            f"{block_hash.hex()[:12]}… its key names; delete it.",
            reason="foreign block",
        )
    _check_payload_checksum(header, payload)
    return header, payload


def check_integrity(blob: bytes | bytearray | memoryview) -> BlobHeader:
    """What a tier can check without the model or the secret: the header, the length (with
    or without an authentication tag) and the payload checksum. Raises `CorruptBlock`."""
    view = _byte_view("blob", blob)
    header = read_header(view)
    size = len(view) - HEADER_SIZE
    if size == header.payload_length + TAG_SIZE:
        size = header.payload_length
    _check_payload_length(header, size)
    _check_payload_checksum(header, view[HEADER_SIZE : HEADER_SIZE + size])
    return header


def blob_sizes(header: BlobHeader) -> tuple[int, int]:
    """The two sizes a whole blob with this header can have: plain and authenticated."""
    plain = HEADER_SIZE + header.payload_length
    return plain, plain + TAG_SIZE


def check_secret(secret: object) -> bytes:
    """Return `secret` if it can key the blobs' HMAC (bytes, at least 16 of them), else
    raise `InvalidArgument`."""
    if not isinstance(secret, bytes) or len(secret) < MIN_SECRET_BYTES:
        shown = f"{len(secret)} bytes" if isinstance(secret, bytes) else type(secret).__name__
        raise InvalidArgument(
            f"a blob secret is bytes, at least {MIN_SECRET_BYTES} of them (e.g. "
            f"secrets.token_bytes(32)); got {shown}."
        )
    return secret


def _tag(key: bytes, data: bytes | memoryview) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


def _check_payload_length(header: BlobHeader, size: int) -> None:
    if size != header.payload_length:
        raise CorruptBlock(
            f"blob holds {size} payload bytes, its header says "
            f"{header.payload_length} (truncated or padded write); delete it.",
            reason="truncated" if size < header.payload_length else "length",
        )


def _check_payload_checksum(header: BlobHeader, payload: memoryview) -> None:
    if zlib.crc32(payload) != header.payload_checksum:
        raise CorruptBlock(
            "the blob's payload checksum does not match (bytes flipped or torn); delete it "
            "and recompute the block.",
            reason="payload checksum",
        )


def _byte_view(name: str, value: object) -> memoryview:
    """`value` (bytes, bytearray or a C-contiguous memoryview) as a flat view of bytes."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidArgument(
            f"{name} must be bytes, bytearray or memoryview, got {type(value).__name__}; "
            "pass raw bytes (for a tensor: tensor.contiguous().view(torch.uint8).numpy())."
        )
    try:
        return memoryview(value).cast("B")
    except TypeError as err:
        raise InvalidArgument(
            f"{name} must be one contiguous run of bytes ({err}); pass bytes(...) of it."
        ) from err


@dataclass(frozen=True)
class ModelFingerprint:
    """Everything that must match for stored K/V to be reusable: the model (its id and a
    digest of its weights), the K/V dtype and shape, the block size, layout and format.

    Two engines share blocks only when their fingerprints are equal; the digest goes into
    every key and every blob header.
    """

    model_id: str
    weights_digest: str
    dtype: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    layout: str = LAYOUT
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        _dtype(self.dtype)
        for name in ("num_layers", "num_kv_heads", "head_dim", "block_size"):
            require_positive_int(name, getattr(self, name))
        if not self.model_id or not self.weights_digest:
            raise InvalidArgument(
                "a fingerprint needs a model id and a weights digest (e.g. the SHA-256 of the "
                "weights); paged_kv.tiers.fingerprint_model computes both for a model."
            )

    @property
    def payload_shape(self) -> tuple[int, int, int, int, int]:
        """The shape of one block's payload: [layers, 2 (K, V), block size, KV heads, dim]."""
        return (self.num_layers, 2, self.block_size, self.num_kv_heads, self.head_dim)

    @property
    def payload_bytes(self) -> int:
        return prod(self.payload_shape) * DTYPES[self.dtype][1]

    @property
    def max_blob_bytes(self) -> int:
        """The largest blob of this fingerprint: header, payload and an authentication tag.
        Tiers read no more than this of a value (`Tier.get_many(keys, max_bytes=)`)."""
        return HEADER_SIZE + self.payload_bytes + TAG_SIZE

    def digest(self) -> bytes:
        """SHA-256 over a length-prefixed encoding of every field (stable across processes)."""
        parts = [str(v).encode() for v in astuple(self)]
        return hashlib.sha256(
            b"paged_kv.fingerprint.v1" + b"".join(struct.pack("<Q", len(p)) + p for p in parts)
        ).digest()


_NAMESPACE = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # always fullmatch: no trailing newline


@dataclass(frozen=True)
class KeySpace:
    """Keys of one model's blocks: `namespace:fingerprint:block hash` (hex).

    The namespace separates deployments sharing a store; the fingerprint separates models
    and layouts; the chained block hash (whose root mixes in the tenant's salt) names the
    block's whole prefix. No hash tag: in a Redis Cluster the keys spread over all slots.
    """

    namespace: str
    fingerprint: ModelFingerprint

    def __post_init__(self) -> None:
        check_namespace(self.namespace)
        if not isinstance(self.fingerprint, ModelFingerprint):
            raise InvalidArgument(
                "a key space needs a ModelFingerprint; paged_kv.tiers.fingerprint_model(model, "
                "block_size) makes one."
            )

    @cached_property
    def fingerprint_digest(self) -> bytes:
        return self.fingerprint.digest()

    @cached_property
    def prefix(self) -> str:
        return f"{self.namespace}:{self.fingerprint_digest.hex()[:32]}:"

    def key(self, block_hash: bytes) -> str:
        _digest32("block_hash", block_hash)
        return self.prefix + block_hash.hex()

    def keys(self, block_hashes: Sequence[bytes]) -> list[str]:
        prefix = self.prefix
        return [prefix + _digest32("block_hash", h).hex() for h in block_hashes]


def check_namespace(namespace: object) -> str:
    """Return `namespace` if it can be part of keys and directory names, else raise."""
    if not _is_namespace(namespace):
        raise InvalidArgument(
            f"namespace {namespace!r} must be 1-64 letters, digits, '_', '.' or '-', and not "
            "'.' or '..' (it becomes part of keys and directory names)."
        )
    return namespace


def parse_key(key: str) -> tuple[str, str, str]:
    """(namespace, fingerprint hex, block hash hex) of a key made by `KeySpace.key`."""
    parts = key.split(":") if isinstance(key, str) else []
    if (
        len(parts) != 3
        or not _is_namespace(parts[0])
        or not re.fullmatch(r"[0-9a-f]{32}", parts[1])
        or not re.fullmatch(r"[0-9a-f]{64}", parts[2])
    ):
        raise InvalidArgument(
            f"{key!r} is not a block key; make keys with KeySpace(namespace, fingerprint).key()."
        )
    return parts[0], parts[1], parts[2]


def _is_namespace(value: object) -> TypeGuard[str]:
    return (
        isinstance(value, str)
        and _NAMESPACE.fullmatch(value) is not None
        and value not in (".", "..")
    )


def _dtype(name: object) -> tuple[int, int]:
    if not isinstance(name, str) or name not in DTYPES:
        raise InvalidArgument(f"dtype {name!r} is not storable; use one of {sorted(DTYPES)}.")
    return DTYPES[name]


def _shape(shape: Sequence[int]) -> tuple[int, ...]:
    dims = tuple(require_int("a shape dimension", d) for d in shape)
    if not 1 <= len(dims) <= MAX_DIMS or any(d >= 2**32 for d in dims):
        raise InvalidArgument(
            f"shape {dims} must have 1 to {MAX_DIMS} dimensions, each below 2**32."
        )
    return dims


def _digest32(name: str, value: object) -> bytes:
    if not isinstance(value, bytes) or len(value) != 32:
        raise InvalidArgument(
            f"{name} must be 32 bytes (a SHA-256 digest), got {type(value).__name__} "
            f"of length {len(value) if isinstance(value, bytes) else '?'}."
        )
    return value
