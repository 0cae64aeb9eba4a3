"""Chapter 04: plausible wrong hashes, lookups and adds, each failing its check, naming the mistake.

The hash functions are defined at module level: the check runs them again in fresh Python
processes (other PYTHONHASHSEEDs), which re-executes this file's definitions.
"""

import contextlib
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


str_of_the_salt = _chain(
    lambda block: struct.pack(f"<{len(block)}q", *block), lambda salt: str(salt).encode()
)


def truncated(token_ids, block_size, salt=None):
    return [h[:8] for h in chained_hashes(token_ids, block_size, salt)]


def trims_the_tokens(token_ids, block_size, salt=None):
    del token_ids[len(token_ids) // block_size * block_size :]
    return chained_hashes(token_ids, block_size, salt)


def rehashes_the_prefix(token_ids, block_size, salt=None):
    root = b"no salt" if salt is None else b"salt:" + salt.encode()
    return [
        hashlib.sha256(root + struct.pack(f"<{end}q", *token_ids[:end])).digest()
        for end in range(block_size, len(token_ids) + 1, block_size)
    ]


def salt_without_default(token_ids, block_size, salt):
    return chained_hashes(token_ids, block_size, salt)


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
        (hex_strings, r"each hash should be bytes, but yours are str .*not \.hexdigest\(\)"),
        (truncated, "yours are 8 bytes .*keep all 32 bytes"),
        (str_of_the_salt, r"salt='None' and no salt \(None\) give the same hashes"),
        (trims_the_tokens, "changed the token_ids list it was given"),
        (rehashes_the_prefix, "work per block grows with the prompt"),
        (salt_without_default, r"salt optional with the default None"),
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


def trims_the_hashes(index, hashes, num_prompt_tokens, block_size):
    del hashes[(num_prompt_tokens - 1) // block_size :]
    return cached_prefix(index, hashes, len(hashes) * block_size + 1, block_size)


def looks_up_all_then_cuts(index, hashes, num_prompt_tokens, block_size):
    found = [index.get(h) for h in hashes]
    blocks = []
    for block in found[: (num_prompt_tokens - 1) // block_size]:
        if block is None:
            break
        blocks.append(block)
    return blocks


def scans_the_index(index, hashes, num_prompt_tokens, block_size):
    blocks = []
    for digest in hashes[: (num_prompt_tokens - 1) // block_size]:
        hit = next((b for h, b in index.items() if h == digest), None)
        if hit is None:
            break
        blocks.append(hit)
    return blocks


def block_zero_is_a_miss(index, hashes, num_prompt_tokens, block_size):
    blocks = []
    for digest in hashes[: (num_prompt_tokens - 1) // block_size]:
        block = index.get(digest)
        if not block:
            break
        blocks.append(block)
    return blocks


def drops_the_last_hash(index, hashes, num_prompt_tokens, block_size):
    return covers_the_last_token(index, hashes[:-1], num_prompt_tokens, block_size)


def swallows_the_read_only_error(index, hashes, num_prompt_tokens, block_size):
    blocks = cached_prefix(index, hashes, num_prompt_tokens, block_size)
    with contextlib.suppress(Exception):
        index[b"mine"] = 0
    return blocks


@pytest.mark.parametrize(
    ("fn", "mistake"),
    [
        (any_cached_hash, "stop at the first hash the index lacks"),
        (covers_the_last_token, "the last prompt token is never a hit"),
        (cap_off_by_one, "the last prompt token is never a hit"),
        (returns_the_hashes, "return the block ids the index maps the hashes to"),
        (pops_from_the_index, r"the index is read-only: .*your code called index\.pop"),
        (swallows_the_read_only_error, r"the index is read-only: .*index\[h\] = \.\.\."),
        (skips_the_first_block, "the longest run of hashes from the start"),
        (trims_the_hashes, "changed the list of hashes it was given"),
        (looks_up_all_then_cuts, "stop at the first miss"),
        (scans_the_index, "iterated over the index"),
        (block_zero_is_a_miss, "block id 0 is a valid block id"),
        (drops_the_last_hash, "your hits stop one block short"),
    ],
)
def test_a_wrong_lookup_fails_naming_its_mistake(fn, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_cached_prefix(fn)
    message = str(failure.value)
    assert message.startswith("Exercise 2 (cached_prefix)")
    assert "block_hashes(" in message and "seed=0" in message  # a replayable repro
    assert "index = MappingProxyType(index)" in message  # read-only in the replay too


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


def extends_the_hits(pool, hits, num_blocks):
    table = allocate_table(pool, list(hits), num_blocks)
    hits.extend(table[len(hits) :])
    return hits


def swallows_errors(pool, hits, num_blocks):
    fresh = num_blocks - len(hits)
    available = pool.num_available - sum(1 for b in hits if pool.ref_count(b) == 0)
    if fresh > available:
        raise OutOfBlocks("short", requested=fresh, available=available)
    try:
        pool.share(hits)
        return hits + pool.allocate(fresh)
    except Exception:
        return list(hits)


def scans_the_pool(pool, hits, num_blocks):
    fresh = num_blocks - len(hits)
    cached = 0
    for block in range(pool.num_blocks):
        if block in hits and pool.ref_count(block) == 0:
            cached += 1
    available = pool.num_available - cached
    if fresh > available:
        raise OutOfBlocks("short", requested=fresh, available=available)
    pool.share(hits)
    return hits + pool.allocate(fresh)


@pytest.mark.parametrize(
    ("fn", "mistake"),
    [
        (shares_before_checking, "shared the hits before pool.allocate refused"),
        (shares_then_undoes, "^[^\n]*sharing, then undoing, moves the hits"),
        (forgets_the_revived_hits, r"^[^\n]*pool\.num_available \(4\) counts the 1 cached hit"),
        (allocates_before_sharing, "your allocation evicted them"),
        (wrong_available, r"So OutOfBlocks\(requested=4, available=3\); got requested=5"),
        (fresh_blocks_first, "followed by"),
        (
            refuses_an_exact_fit,
            r"fit exactly .*allocate_table\(pool, \[0\], 4\)` raised OutOfBlocks",
        ),
        (extends_the_hits, "changed the list of hits it was given"),
        (swallows_errors, "instead of letting the error through"),
        (scans_the_pool, "it scans the pool"),
    ],
)
def test_a_wrong_add_fails_naming_its_mistake(fn, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_allocate_table(fn)
    assert str(failure.value).startswith("Exercise 3 (allocate_table)")


def test_parts_so_far_catch_a_wrong_part_inside_a_real_manager():
    with pytest.raises(CheckFailed, match="your prefix_lookup returned") as failure:
        checks.check_prefix_parts(chained_hashes, skips_the_first_block, allocate_table)
    assert "Your code returned without an error" not in str(failure.value)  # the part's answer
    with pytest.raises(CheckFailed, match="your allocate_table returned"):
        checks.check_prefix_parts(chained_hashes, cached_prefix, fresh_blocks_first)
    with pytest.raises(CheckFailed, match=r"yours are str .*not \.hexdigest\(\)"):
        checks.check_prefix_parts(hex_strings, cached_prefix, allocate_table)
    with pytest.raises(CheckFailed, match="the index is read-only"):
        checks.check_prefix_parts(chained_hashes, pops_from_the_index, allocate_table)


def test_parts_so_far_say_when_the_library_pool_and_policy_stand_in(capsys):
    checks.check_prefix_parts(chained_hashes, cached_prefix, allocate_table)
    assert "with the library's BlockPool and 'lru' policy" in capsys.readouterr().out


def test_saving_a_stub_warns(tmp_path, monkeypatch, capsys):
    from paged_kv.course import parts

    monkeypatch.setenv("PAGED_KV_PARTS", str(tmp_path))
    saved = parts.save(block_hasher=a_stub)
    assert [p.name for p in saved] == ["block_hasher.py"]  # still the paths, in a list
    assert "`a_stub` still has a stub" in capsys.readouterr().out
    parts.save(block_hasher=chained_hashes)
    assert "still has a stub" not in capsys.readouterr().out


def a_stub(token_ids, block_size, salt=None):
    raise NotImplementedError("chained_hashes: replace this line with your code")
