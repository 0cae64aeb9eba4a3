"""Known answers for the block-hash format: the exact bytes of a few chained block hashes.

Block hashes name cached KV content. Anything that keeps them beyond one process (a shared
prefix-cache index, a KV offload tier, a saved trace) must see the same hash for the same
prefix, so the encoding is a format, not an implementation detail. These constants were
computed from `paged_kv.cache.hashing` as of `DOMAIN == b"paged_kv.block.v1"`.

Changing the format is allowed, but only on purpose: bump the version in
`paged_kv.cache.hashing.DOMAIN` (v1 -> v2), recompute these constants and update them here
together with `EXPECTED_DOMAIN`, and say in the commit why the format changed. A failure of
this file without a bumped DOMAIN means the format changed by accident.
"""

import hashlib
import os
import struct
import subprocess
import sys

import pytest

from paged_kv.cache import block_hashes, hash_block, hashing
from paged_kv.cache.hashing import BlockHashChain

EXPECTED_DOMAIN = b"paged_kv.block.v1"

BLOCK = [1, 2, 3, 4]

# hash_block(None, BLOCK, ...) for each salt / extra keys: the first block of a chain.
FIRST_BLOCK = {
    "no salt": (
        {},
        "db30dc1a955a5aa39b410b5e49e35daf58eaf06dea3cd7fc55520edd0cdf2ee9",
    ),
    "str salt": (
        {"salt": "tenant-a"},
        "6b345355a20146635317b97b04eae4b74c458144b1f3d9033a2dc494e502e87c",
    ),
    "bytes salt": (
        {"salt": b"tenant-a"},
        "36adc91bfb58b8b05fc874fb47ab32700ce255fb960fcba193668ed302729972",
    ),
    "extra keys": (
        {"extra_keys": ("lora-7", 3, b"\x00", ("img", 42))},
        "e27f4343c40cba94276285f02ac0369b57bcaffddaf6eecb8a803f6aa628e11a",
    ),
}

# block_hashes(list(range(12)), 4): three chained blocks.
CHAIN_OF_3 = [
    "f15c39047f7cd916716d32252c7334cf7d42ea5ddb519b5637944ef0ee9c5b0a",
    "5d4dc4bbf03f8d3f79cff08a4cda47fa5b6c9621a2cc13ebb89f1eea8666a741",
    "3ef23bf7eea38eb53b6599bd9a1b1376abbb2eeabb95a909ab4bc126c0bd8ea0",
]

# Token ids past one byte (real vocabularies: 151,935 is Qwen2's size), 2**31 past int32.
BIG_TOKENS = [256, 1000, 2**31, 151_935]
BIG_TOKENS_HASH = "bbf49e6e93e1a2a913b842a0391e7945c8d843850433d987c00f73d3708cbb10"

# A block after a given parent (32 zero bytes), holding token id 0 four times.
CHILD_OF_ZERO_PARENT = "1f21cb83262a799399199a325a638bdc79453838a9736b90ef7d1ed2fdb9971b"


def test_the_format_version_is_the_one_these_answers_were_computed_for():
    assert hashing.DOMAIN == EXPECTED_DOMAIN, (
        "DOMAIN changed: recompute every constant in this file for the new format version."
    )


@pytest.mark.parametrize("case", sorted(FIRST_BLOCK))
def test_first_block_hashes_are_pinned(case):
    kwargs, expected = FIRST_BLOCK[case]
    assert hash_block(None, BLOCK, **kwargs).hex() == expected
    assert [h.hex() for h in block_hashes(BLOCK, 4, **kwargs)] == [expected]


def test_a_chain_of_three_blocks_is_pinned():
    chain = block_hashes(list(range(12)), 4)
    assert [h.hex() for h in chain] == CHAIN_OF_3
    # Each link is hash_block of its parent, and a partial fourth block adds nothing.
    assert hash_block(chain[1], [8, 9, 10, 11]).hex() == CHAIN_OF_3[2]
    assert [h.hex() for h in block_hashes(list(range(14)), 4)] == CHAIN_OF_3
    # Continuing a chain from a parent gives the same links as hashing it in one go.
    tail = block_hashes(list(range(4, 12)), 4, parent=chain[0])
    assert [h.hex() for h in tail] == CHAIN_OF_3[1:]


def test_token_ids_of_any_size_are_pinned():
    assert hash_block(None, BIG_TOKENS).hex() == BIG_TOKENS_HASH
    assert hash_block(bytes(32), [0, 0, 0, 0]).hex() == CHILD_OF_ZERO_PARENT
    # Not folded into a byte: 256 is not 0, 1000 is not 1000 % 256.
    assert hash_block(None, [0, 1000 % 256, 0, 0]) != hash_block(None, [256, 1000, 0, 0])


def test_the_first_block_rebuilt_from_the_documented_layout():
    """The layout, spelled out: SHA-256 over DOMAIN, b"\\x00root", the salt field, the token
    field (little-endian int64 each), the extra-keys field; a field is its length as a
    little-endian uint64, then its bytes; None encodes as b"n", a str as b"s" + UTF-8, a
    tuple as b"t" + its encoded fields. A later block has b"\\x01" + parent instead of the
    root marker and the salt."""

    def field(data: bytes) -> bytes:
        return struct.pack("<Q", len(data)) + data

    first = hashlib.sha256(
        EXPECTED_DOMAIN
        + b"\x00root"
        + field(b"s" + b"tenant-a")
        + field(struct.pack("<4q", *BLOCK))
        + field(b"t")
    ).digest()
    assert first == hash_block(None, BLOCK, salt="tenant-a")
    second = hashlib.sha256(
        EXPECTED_DOMAIN + b"\x01" + first + field(struct.pack("<4q", 5, 6, 7, 8)) + field(b"t")
    ).digest()
    assert block_hashes([*BLOCK, 5, 6, 7, 8], 4, salt="tenant-a") == [first, second]


def test_str_salted_hashes_do_not_depend_on_pythonhashseed():
    code = (
        "from paged_kv.cache import block_hashes;"
        "print(','.join(h.hex() for h in block_hashes(list(range(12)), 4, salt='tenant-a')))"
    )
    runs = set()
    for seed in ("1", "4242"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        runs.add(out)
    here = ",".join(h.hex() for h in block_hashes(list(range(12)), 4, salt="tenant-a"))
    assert runs == {here}
    assert here.split(",")[0] != CHAIN_OF_3[0]  # the salt really is mixed in


# Token id 0 is a token like any other: in prompts, appends, hashes, the engine and the byte
# tokenizer (it is the NUL byte). A falsy-value check (`if token:`, `0 < t`) anywhere would
# drop or refuse it.


def test_zero_blocks_hash_differently_from_other_blocks_and_from_nothing():
    zeros = block_hashes([0] * 8, 4)
    assert len(zeros) == 2 and zeros[0] != zeros[1]
    assert zeros != block_hashes([1] * 8, 4)
    assert block_hashes([0, 0, 0, 5], 4) != block_hashes([0, 0, 5, 0], 4)


# The manager's unchecked pool calls and hash chain: the same results as the checked calls.


@pytest.mark.parametrize("salt, extra_keys", [(None, ()), ("tenant", ("lora", 3))])
def test_a_hash_chain_continues_where_it_stopped(salt, extra_keys):
    tokens = list(range(40))
    want = block_hashes(tokens, 8, salt=salt, extra_keys=extra_keys)
    chain = BlockHashChain(8, salt=salt, extra_keys=extra_keys)
    first = chain.hashes(tokens[:20])  # two full blocks; the partial third has no hash
    assert first == want[:2]
    assert chain.hashes(tokens[16:], parent=first[-1]) == want[2:]
    assert chain.hashes(tokens[:7]) == []


# Prefix caching: chained hashes, sharing, salts, forks with copy-on-write, reset, metrics.


def test_hash_chains_the_parent_so_equal_blocks_at_different_places_differ():
    a = block_hashes([1, 2, 3, 4, 1, 2, 3, 4], 4)
    assert len(a) == 2 and a[0] != a[1]  # same tokens, different prefix
    assert a[1] == hash_block(a[0], [1, 2, 3, 4])
    assert block_hashes([1, 2, 3], 4) == []  # a partial block has no hash
    assert block_hashes([1, 2, 3, 4], 4, extra_keys=("lora-a",)) != block_hashes([1, 2, 3, 4], 4)
    assert block_hashes([1, 2, 3, 4], 4, salt="t1") != block_hashes([1, 2, 3, 4], 4, salt=b"t1")


def test_hashes_are_identical_across_processes_with_different_hash_seeds():
    code = (
        "from paged_kv.cache.hashing import block_hashes;"
        "print([h.hex() for h in block_hashes(list(range(40)), 16, salt='tenant', "
        "extra_keys=('adapter', 3))])"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("0", "12345")
    }
    assert len(outputs) == 1 and "[" in outputs.pop()
