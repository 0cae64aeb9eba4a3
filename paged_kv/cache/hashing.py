"""Content hashes of full KV blocks, chained so a hash names a whole prefix.

hash(block i) = SHA-256(parent hash, the block's token ids, extra keys), and the first block
also mixes in the request's salt. Equal hashes mean equal prefixes, in any process on any
machine: the bytes hashed are a fixed encoding, never Python's `hash()` (randomised per
process for str and bytes, colliding by design, e.g. hash(-1) == hash(-2), and constant for
None since Python 3.12, which once let a production server's chains collide).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from hashlib import sha256

from paged_kv.errors import InvalidArgument
from paged_kv.validation import require_positive_int

BlockHash = bytes  # a 32-byte SHA-256 digest
Salt = str | bytes | None
ExtraKey = str | bytes | int | tuple
DOMAIN = b"paged_kv.block.v1"
_CHILD = DOMAIN + b"\x01"  # how a block after a parent starts: domain, then link


def check_salt(salt: object) -> Salt:
    """Return `salt` if it is None, bytes or a str that UTF-8 encodes (no lone surrogate);
    otherwise raise `InvalidArgument`."""
    if salt is not None and not isinstance(salt, str | bytes):
        raise InvalidArgument(
            f"a salt must be a str, bytes or None, got {type(salt).__name__}; pass e.g. the "
            "tenant id as a string."
        )
    if isinstance(salt, str):
        _utf8(salt, "a salt")
    return salt


def check_extra_keys(extra_keys: object) -> tuple[ExtraKey, ...]:
    """`extra_keys` as a tuple if every key is a str, bytes, int or a tuple of them (what the
    block hashes encode); otherwise raise `InvalidArgument` before anything uses them."""
    if isinstance(extra_keys, str | bytes) or not isinstance(extra_keys, Sequence):
        raise InvalidArgument(
            f"extra_keys must be a sequence of keys, got {type(extra_keys).__name__}; pass a "
            "tuple, e.g. (image_hash,)."
        )
    keys = tuple(extra_keys)
    if keys:
        _encode(keys)  # raises on a key the hashes cannot encode
    return keys


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise InvalidArgument(
            f"{what} must encode as UTF-8; {text!r} has {err.reason} at {err.start}."
        ) from None


def hash_block(
    parent: BlockHash | None,
    token_ids: Sequence[int],
    *,
    salt: Salt = None,
    extra_keys: Sequence[ExtraKey] = (),
) -> BlockHash:
    """The chained hash of one full block. `parent` is None for the first block only."""
    chain = BlockHashChain(len(token_ids), salt=salt, extra_keys=extra_keys)
    return chain.hashes(token_ids, parent)[0]


def block_hashes(
    token_ids: Sequence[int],
    block_size: int,
    *,
    salt: Salt = None,
    extra_keys: Sequence[ExtraKey] = (),
    parent: BlockHash | None = None,
) -> list[BlockHash]:
    """Chained hashes of every full block of `token_ids` (a partial last block has none).

    `parent` continues an existing chain: the hash of the block before `token_ids`.
    """
    return BlockHashChain(block_size, salt=salt, extra_keys=extra_keys).hashes(token_ids, parent)


class BlockHashChain:
    """`block_hashes` for one sequence: the salt, extra keys and block size its blocks share
    are encoded once, so a block that fills later costs one SHA-256 of its own tokens."""

    __slots__ = ("_extra", "_length", "_root", "block_size")

    def __init__(
        self, block_size: int, *, salt: Salt = None, extra_keys: Sequence[ExtraKey] = ()
    ) -> None:
        self.block_size = require_positive_int("block_size", block_size)
        self._root = DOMAIN + _root_link(salt)
        self._extra = _field(_encode(tuple(extra_keys)))
        self._length = struct.pack("<Q", 8 * block_size)  # each block's tokens field: its length

    def hashes(self, token_ids: Sequence[int], parent: BlockHash | None = None) -> list[BlockHash]:
        """Chained hashes of every full block of `token_ids`, the first one after `parent`.

        Each is SHA-256(domain, link, the tokens' field: their length and little-endian
        int64s, extra keys), where the link is the salted root or the parent's hash."""
        full = len(token_ids) // self.block_size * self.block_size
        if not full:
            return []
        packed = struct.pack(f"<{full}q", *token_ids[:full])  # every block's tokens, packed once
        head = self._root if parent is None else _CHILD + parent  # domain and link
        width, length, extra, hashes = 8 * self.block_size, self._length, self._extra, []
        for start in range(0, len(packed), width):
            parent = sha256(b"".join((head, length, packed[start : start + width], extra))).digest()
            hashes.append(parent)
            head = _CHILD + parent
        return hashes


def namespace_key(salt: Salt, extra_keys: Sequence[ExtraKey] = ()) -> bytes:
    """The canonical bytes of a salt and extra keys: sequences share blocks only within one.

    The hash chain mixes salt and extra keys into its hashes; an index that keys blocks by
    tokens instead (the radix tree) keeps one tree per namespace."""
    return _field(_encode(check_salt(salt))) + _field(_encode(tuple(extra_keys)))


def _root_link(salt: Salt) -> bytes:
    """What ties a first block to what precedes it: the salted root. (A later block's link
    is b"\\x01" + its parent's hash.)"""
    return b"\x00root" + _field(_encode(check_salt(salt)))


def _field(data: bytes) -> bytes:
    """Length-prefixed, so no two different field lists encode to the same bytes."""
    return struct.pack("<Q", len(data)) + data


def _encode(value: object) -> bytes:
    """A type-tagged, canonical encoding of salts and extra keys."""
    if value is None:
        return b"n"
    if isinstance(value, bool):
        raise InvalidArgument("extra keys may be str, bytes, int or tuples of them, not bool.")
    if isinstance(value, int):
        return b"i" + str(value).encode()
    if isinstance(value, str):
        return b"s" + _utf8(value, "an extra key")
    if isinstance(value, bytes):
        return b"b" + value
    if isinstance(value, tuple | list):
        return b"t" + b"".join(_field(_encode(v)) for v in value)
    raise InvalidArgument(
        f"extra keys may be str, bytes, int or tuples of them, got {type(value).__name__}."
    )
