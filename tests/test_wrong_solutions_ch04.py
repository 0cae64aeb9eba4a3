"""Chapter 04: plausible wrong hashes, lookups and adds, each failing its check, naming the mistake.

The hash functions are defined at module level: the check runs them again in fresh Python
processes (other PYTHONHASHSEEDs), which re-executes this file's definitions.
"""

import hashlib
import struct

import pytest

from paged_kv import OutOfBlocks
from paged_kv.cache.hashing import block_hashes
from paged_kv.course import checks
from paged_kv.course.checks import CheckFailed


def chained_hashes(token_ids, block_size, salt=None):
    parent = b"no salt" if salt is None else b"salt:" + salt.encode()
    out = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        block = token_ids[start : start + block_size]
        parent = hashlib.sha256(parent + struct.pack(f"<{len(block)}q", *block)).digest()
        out.append(parent)
    return out


def cached_prefix(index, hashes, num_prompt_tokens, block_size):
    blocks = []
    for digest in hashes[: (num_prompt_tokens - 1) // block_size]:
        if digest not in index:
            break
        blocks.append(index[digest])
    return blocks


def allocate_table(pool, hits, num_blocks):
    fresh = num_blocks - len(hits)
    available = pool.num_available - sum(1 for b in hits if pool.ref_count(b) == 0)
    if fresh > available:
        raise OutOfBlocks("short", requested=fresh, available=available)
    pool.share(hits)
    return hits + pool.allocate(fresh)


def test_the_solution_and_the_library_pass():
    checks.check_chained_hash(chained_hashes)
    checks.check_chained_hash(block_hashes)
    checks.check_cached_prefix(cached_prefix)
    checks.check_allocate_table(allocate_table)
    checks.check_prefix_parts(chained_hashes, cached_prefix, allocate_table)


# -- exercise 1: the chained hash --------------------------------------------------------------


def _chain(
    encode, salt_bytes=lambda salt: b"no salt" if salt is None else b"salt:" + salt.encode()
):
    def hashes(token_ids, block_size, salt=None):
        parent = salt_bytes(salt)
        out = []
        for start in range(0, len(token_ids) - block_size + 1, block_size):
            parent = hashlib.sha256(parent + encode(token_ids[start : start + block_size])).digest()
            out.append(parent)
        return out

    return hashes


def unchained(token_ids, block_size, salt=None):
    return [
        hashlib.sha256(repr((salt, token_ids[i : i + block_size])).encode()).digest()
        for i in range(0, len(token_ids) - block_size + 1, block_size)
    ]


low_byte = _chain(lambda block: bytes(t & 0xFF for t in block))
two_bytes = _chain(lambda block: struct.pack(f"<{len(block)}H", *(t & 0xFFFF for t in block)))
decimal_digits = _chain(lambda block: "".join(map(str, block)).encode())
raw_bytes = _chain(bytes)
empty_salt_is_no_salt = _chain(
    lambda block: struct.pack(f"<{len(block)}q", *block), lambda salt: (salt or "").encode()
)
salt_ignored = _chain(lambda block: struct.pack(f"<{len(block)}q", *block), lambda salt: b"")


def pythons_hash(token_ids, block_size, salt=None):
    out, parent = [], None
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        key = hash((parent, salt, tuple(token_ids[start : start + block_size])))
        parent = hashlib.sha256(str(key).encode()).digest()
        out.append(parent)
    return out


def partial_block_too(token_ids, block_size, salt=None):
    out = chained_hashes(token_ids, block_size, salt)
    if len(token_ids) % block_size:
        out.append(hashlib.sha256(repr(token_ids).encode()).digest())
    return out


def hex_strings(token_ids, block_size, salt=None):
    return [h.hex() for h in chained_hashes(token_ids, block_size, salt)]


@pytest.mark.parametrize(
    ("fn", "mistake"),
    [
        (unchained, "chain the parent's hash in"),
        (low_byte, "encode each id whole, not only its low byte"),
        (two_bytes, "Two bytes per id are not enough"),
        (decimal_digits, r"'1'\+'23' == '12'\+'3'"),
        (raw_bytes, r"your code raised ValueError: bytes must be in range"),
        (empty_salt_is_no_salt, r"salt='' and no salt \(None\) give the same hashes"),
        (salt_ignored, "must change every hash of the chain"),
        (pythons_hash, "PYTHONHASHSEED=1"),
        (partial_block_too, "a partial block has no hash"),
        (hex_strings, "each hash should be bytes"),
    ],
)
def test_a_wrong_hash_fails_naming_its_mistake(fn, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_chained_hash(fn)
    assert str(failure.value).startswith("Exercise 1 (chained_hashes)")


# -- exercise 2: the longest cached prefix ----------------------------------------------------


def any_cached_hash(index, hashes, num_prompt_tokens, block_size):
    cap = (num_prompt_tokens - 1) // block_size
    return [index[h] for h in hashes[:cap] if h in index]


def covers_the_last_token(index, hashes, num_prompt_tokens, block_size):
    blocks = []
    for digest in hashes:
        if digest not in index:
            break
        blocks.append(index[digest])
    return blocks


def cap_off_by_one(index, hashes, num_prompt_tokens, block_size):
    return cached_prefix(index, hashes, num_prompt_tokens + 1, block_size)


def returns_the_hashes(index, hashes, num_prompt_tokens, block_size):
    found = cached_prefix(index, hashes, num_prompt_tokens, block_size)
    return hashes[: len(found)]


def pops_from_the_index(index, hashes, num_prompt_tokens, block_size):
    blocks = cached_prefix(index, hashes, num_prompt_tokens, block_size)
    for digest in hashes[: len(blocks)]:
        index.pop(digest)
    return blocks


def skips_the_first_block(index, hashes, num_prompt_tokens, block_size):
    return cached_prefix(index, hashes, num_prompt_tokens, block_size)[1:]


@pytest.mark.parametrize(
    ("fn", "mistake"),
    [
        (any_cached_hash, "stop at the first hash the index lacks"),
        (covers_the_last_token, "the last prompt token is never a hit"),
        (cap_off_by_one, "the last prompt token is never a hit"),
        (returns_the_hashes, "return the block ids the index maps the hashes to"),
        (pops_from_the_index, "raised AttributeError"),
        (skips_the_first_block, "the longest run of hashes from the start"),
    ],
)
def test_a_wrong_lookup_fails_naming_its_mistake(fn, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_cached_prefix(fn)
    message = str(failure.value)
    assert message.startswith("Exercise 2 (cached_prefix)")
    assert "block_hashes(" in message and "seed=0" in message  # a replayable repro


# -- exercise 3: the all-or-nothing add --------------------------------------------------------


def shares_before_checking(pool, hits, num_blocks):
    pool.share(hits)
    return hits + pool.allocate(num_blocks - len(hits))


def shares_then_undoes(pool, hits, num_blocks):
    pool.share(hits)
    try:
        return hits + pool.allocate(num_blocks - len(hits))
    except OutOfBlocks:
        pool.release(hits)
        raise


def forgets_the_revived_hits(pool, hits, num_blocks):
    fresh = num_blocks - len(hits)
    if fresh > pool.num_available:
        raise OutOfBlocks("short", requested=fresh, available=pool.num_available)
    pool.share(hits)
    return hits + pool.allocate(fresh)


def allocates_before_sharing(pool, hits, num_blocks):
    fresh = num_blocks - len(hits)
    available = pool.num_available - sum(1 for b in hits if pool.ref_count(b) == 0)
    if fresh > available:
        raise OutOfBlocks("short", requested=fresh, available=available)
    new = pool.allocate(fresh)
    pool.share(hits)
    return hits + new


def wrong_available(pool, hits, num_blocks):
    fresh = num_blocks - len(hits)
    available = pool.num_available - sum(1 for b in hits if pool.ref_count(b) == 0)
    if fresh > available:
        raise OutOfBlocks("short", requested=num_blocks, available=pool.num_free)
    pool.share(hits)
    return hits + pool.allocate(fresh)


def fresh_blocks_first(pool, hits, num_blocks):
    table = allocate_table(pool, hits, num_blocks)
    return table[len(hits) :] + hits


def refuses_an_exact_fit(pool, hits, num_blocks):
    fresh = num_blocks - len(hits)
    available = pool.num_available - sum(1 for b in hits if pool.ref_count(b) == 0)
    if fresh >= available and fresh:
        raise OutOfBlocks("short", requested=fresh, available=available)
    pool.share(hits)
    return hits + pool.allocate(fresh)


@pytest.mark.parametrize(
    ("fn", "mistake"),
    [
        (shares_before_checking, "a refused add must change nothing"),
        (shares_then_undoes, "not even the eviction policy's order"),
        (forgets_the_revived_hits, "stops being evictable once shared|change nothing"),
        (allocates_before_sharing, "your allocation evicted them"),
        (wrong_available, r"So OutOfBlocks\(requested=4, available=3\); got requested=5"),
        (fresh_blocks_first, "followed by"),
        (refuses_an_exact_fit, r"allocate_table\(pool, \[0\], 4\)` raised OutOfBlocks"),
    ],
)
def test_a_wrong_add_fails_naming_its_mistake(fn, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_allocate_table(fn)
    assert str(failure.value).startswith("Exercise 3 (allocate_table)")


def test_parts_so_far_catch_a_wrong_part_inside_a_real_manager():
    with pytest.raises(CheckFailed, match="prefix_lookup returned"):
        checks.check_prefix_parts(chained_hashes, skips_the_first_block, allocate_table)
    with pytest.raises(CheckFailed, match="allocate_table returned"):
        checks.check_prefix_parts(chained_hashes, cached_prefix, fresh_blocks_first)
