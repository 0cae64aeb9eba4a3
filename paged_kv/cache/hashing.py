"""Content hashes of full KV blocks, chained so a hash names a whole prefix.

hash(block i) = SHA-256(parent hash, the block's token ids, extra keys), and the first block
also mixes in the request's salt. Equal hashes mean equal prefixes, in any process on any
machine: the bytes hashed are a fixed encoding, never Python's `hash()` (randomised per
process for str and bytes, colliding by design, e.g. hash(-1) == hash(-2), and constant for
None since Python 3.12, which once let a production server's chains collide).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

from paged_kv.errors import InvalidArgument

BlockHash = bytes  # a 32-byte SHA-256 digest
Salt = str | bytes | None
ExtraKey = str | bytes | int | tuple
DOMAIN = b"paged_kv.block.v1"


def check_salt(salt: object) -> Salt:
    """Return `salt` if it is None, str or bytes; otherwise raise `InvalidArgument`."""
    if salt is not None and not isinstance(salt, str | bytes):
        raise InvalidArgument(
            f"a salt must be a str, bytes or None, got {type(salt).__name__}; pass e.g. the "
            "tenant id as a string."
        )
    return salt


def hash_block(
    parent: BlockHash | None,
    token_ids: Sequence[int],
    *,
    salt: Salt = None,
    extra_keys: Sequence[ExtraKey] = (),
) -> BlockHash:
    """The chained hash of one full block. `parent` is None for the first block only."""
    tokens = _field(struct.pack(f"<{len(token_ids)}q", *token_ids))
    return _digest(_link(parent, salt), tokens, _field(_encode(tuple(extra_keys))))


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
        self.block_size = block_size
        self._root = _link(None, salt)
        self._extra = _field(_encode(tuple(extra_keys)))
        self._length = struct.pack("<Q", 8 * block_size)  # each block's tokens field: its length

    def hashes(self, token_ids: Sequence[int], parent: BlockHash | None = None) -> list[BlockHash]:
        """Chained hashes of every full block of `token_ids`, the first one after `parent`."""
        full = len(token_ids) // self.block_size * self.block_size
        if not full:
            return []
        packed = struct.pack(f"<{full}q", *token_ids[:full])  # every block's tokens, packed once
        link = self._root if parent is None else b"\x01" + parent
        width, length, extra, hashes = 8 * self.block_size, self._length, self._extra, []
        for start in range(0, len(packed), width):
            parent = _digest(link, length + packed[start : start + width], extra)
            hashes.append(parent)
            link = b"\x01" + parent
        return hashes


def namespace_key(salt: Salt, extra_keys: Sequence[ExtraKey] = ()) -> bytes:
    """The canonical bytes of a salt and extra keys: sequences share blocks only within one.

    The hash chain mixes salt and extra keys into its hashes; an index that keys blocks by
    tokens instead (the radix tree) keeps one tree per namespace."""
    return _field(_encode(check_salt(salt))) + _field(_encode(tuple(extra_keys)))


def _link(parent: BlockHash | None, salt: Salt) -> bytes:
    """What ties a block to what precedes it: the salted root, or its parent's hash."""
    if parent is None:
        return b"\x00root" + _field(_encode(check_salt(salt)))
    return b"\x01" + parent


def _digest(link: bytes, tokens_field: bytes, extra: bytes) -> BlockHash:
    """SHA-256 of domain, link, the tokens' field (little-endian int64s) and extra keys."""
    return hashlib.sha256(b"".join((DOMAIN, link, tokens_field, extra))).digest()


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
        return b"s" + value.encode("utf-8")
    if isinstance(value, bytes):
        return b"b" + value
    if isinstance(value, tuple | list):
        return b"t" + b"".join(_field(_encode(v)) for v in value)
    raise InvalidArgument(
        f"extra keys may be str, bytes, int or tuples of them, got {type(value).__name__}."
    )
