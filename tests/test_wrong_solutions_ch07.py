"""Chapter 07: plausible wrong codecs and runs across tiers, each failing its check with a
message that names the mistake (never a traceback into the checks, never a hang)."""

import contextlib
import math
import signal
import struct
import zlib

import pytest

from paged_kv.course import checks
from paged_kv.course.checks import CheckFailed, ExerciseNotDone
from paged_kv.errors import CorruptBlock
from paged_kv.tiers import decode_blob, encode_blob, longest_run
from paged_kv.tiers.codec import DTYPES, FORMAT_VERSION, MAGIC, MAX_DIMS, BlobHeader

FIELDS = struct.Struct("<4sHBB6I32s32sQI")
CRC = struct.Struct("<I")
HEADER_SIZE = FIELDS.size + CRC.size
DTYPE_OF_CODE = {code: name for name, (code, _) in DTYPES.items()}


def encode(payload, *, dtype, shape, fingerprint, block_hash):
    code, _ = DTYPES[dtype]
    dims = [*shape, *[0] * (MAX_DIMS - len(shape))]
    fields = FIELDS.pack(
        MAGIC,
        FORMAT_VERSION,
        code,
        len(shape),
        *dims,
        fingerprint,
        block_hash,
        len(payload),
        zlib.crc32(payload),
    )
    return fields + CRC.pack(zlib.crc32(fields)) + bytes(payload)


def decoder(
    *,
    too_short=lambda blob: len(blob) < HEADER_SIZE,
    magic=True,
    header_crc=True,
    version=True,
    dtype=True,
    ndim_low=True,
    ndim_high=True,
    most_dims=MAX_DIMS,
    padding=True,
    size=True,
    fp_bytes=32,
    bh_bytes=32,
    payload_crc=True,
    none_is_any=True,
    swapped=False,
    version_first=False,
    crc_first=False,
    longer="length",
    reason=lambda r: r,
):
    """The solution's decode, with the mistakes named by the arguments."""

    def refuse(message, why):
        if reason(why) is None:
            raise CorruptBlock(message)
        raise CorruptBlock(message, reason=reason(why))

    def decode(blob, *, fingerprint, block_hash):
        if too_short(blob):
            refuse("shorter than the header", "truncated")
        fields = blob[: FIELDS.size]
        got_magic, got_version, code, ndim, *rest = FIELDS.unpack(fields)
        crc_ok = zlib.crc32(fields) == CRC.unpack_from(blob, FIELDS.size)[0]
        if version_first and version and got_version != FORMAT_VERSION:
            refuse("version", "version")
        if crc_first and header_crc and not crc_ok:
            refuse("header checksum", "header checksum")
        if magic and got_magic != MAGIC:
            refuse("not a paged_kv block", "bad magic")
        if header_crc and not crc_ok:
            refuse("header checksum", "header checksum")
        if version and got_version != FORMAT_VERSION:
            refuse(f"format version {got_version}", "version")
        dims, (stored_fp, stored_hash, length, crc) = rest[:MAX_DIMS], rest[MAX_DIMS:]
        name = DTYPE_OF_CODE.get(code) if dtype else DTYPE_OF_CODE[code]
        if (
            name is None
            or (ndim_low and ndim < 1)
            or (ndim_high and ndim > most_dims)
            or (padding and any(dims[ndim:]))
        ):
            refuse("impossible dtype or shape", "bad header")
        shape = tuple(dims[:ndim])
        if size and math.prod(shape) * DTYPES[name][1] != length:
            refuse("shape and length disagree", "bad header")
        payload = memoryview(blob)[HEADER_SIZE:]
        if len(payload) != length:
            refuse("payload length", "truncated" if len(payload) < length else longer)
        if (fingerprint is not None or not none_is_any) and stored_fp[:fp_bytes] != (
            fingerprint or b""
        )[:fp_bytes]:
            refuse("another model's block", "foreign fingerprint")
        if (block_hash is not None or not none_is_any) and stored_hash[:bh_bytes] != (
            block_hash or b""
        )[:bh_bytes]:
            refuse("another block", "foreign block")
        if payload_crc and zlib.crc32(payload) != crc:
            refuse("payload checksum", "payload checksum")
        header = BlobHeader(got_version, name, shape, stored_fp, stored_hash, length, crc)
        return (payload, header) if swapped else (header, payload)

    return decode


decode = decoder()


def my_longest_run(keys, tiers):
    sources = []
    while len(sources) < len(keys):
        rest = keys[len(sources) :]
        for tier in tiers:
            n = tier.count_leading(rest)
            if n:
                sources += [tier] * n
                break
        else:
            break
    return sources


def test_the_solution_and_the_library_pass(capsys):
    checks.check_blob_codec(encode, decode)
    checks.check_blob_codec(encode_blob, decode_blob)
    checks.check_longest_run(my_longest_run)
    checks.check_longest_run(longest_run)
    assert capsys.readouterr().out.count("✅") == 4


def test_stubs_are_not_done():
    def stub(*args, **kwargs):
        raise NotImplementedError("encode: replace this line with your code")

    with pytest.raises(ExerciseNotDone, match="`encode` still has its stub"):
        checks.check_blob_codec(stub, decode)
    with pytest.raises(ExerciseNotDone, match="`encode` still has its stub"):
        checks.check_blob_codec(encode, stub)
    with pytest.raises(ExerciseNotDone, match="not done yet"):
        checks.check_longest_run(stub)


# -- exercise 1: the blob codec ----------------------------------------------------------------


def nothing_checked_but_crcs_and_lengths():
    return decoder(magic=False, version=False, dtype=False, ndim_low=False, ndim_high=False,
                   padding=False, size=False)  # fmt: skip


def crc_over_the_whole_header(blob, *, fingerprint, block_hash):
    if len(blob) >= HEADER_SIZE and zlib.crc32(blob[:HEADER_SIZE]) != 0:
        raise CorruptBlock("header checksum", reason="header checksum")
    return decode(blob, fingerprint=fingerprint, block_hash=block_hash)


def raises_value_error(blob, *, fingerprint, block_hash):
    try:
        return decode(blob, fingerprint=fingerprint, block_hash=block_hash)
    except CorruptBlock as err:
        raise ValueError(str(err)) from None


class CorruptBlockOfMyOwn(Exception):
    pass


CorruptBlockOfMyOwn.__name__ = "CorruptBlock"


def raises_its_own_corrupt_block(blob, *, fingerprint, block_hash):
    try:
        return decode(blob, fingerprint=fingerprint, block_hash=block_hash)
    except CorruptBlock as err:
        raise CorruptBlockOfMyOwn(str(err)) from None


@pytest.mark.parametrize(
    ("decode_fn", "mistake"),
    [
        (nothing_checked_but_crcs_and_lengths(), r"magic is b'XKVB' was accepted: compare blob"),
        (decoder(magic=False), r"magic is b'XKVB' was accepted: compare blob\[:4\] with MAGIC"),
        (
            decoder(version=False),
            f"version is {FORMAT_VERSION + 1} was accepted: compare it with FORMAT_VERSION",
        ),
        (decoder(dtype=False), r"dtype code is 0.*raised KeyError: 0 .*DTYPE_OF_CODE\.get"),
        (decoder(padding=False), "unused shape slot 5 holds 5 was accepted: the MAX_DIMS - ndim"),
        (decoder(size=False), r"payload length of 28 .* was accepted: prod\(shape\) \* itemsize"),
        (decoder(ndim_low=False), "ndim is 0 .* was accepted: a shape has 1 to MAX_DIMS"),
        (
            decoder(most_dims=MAX_DIMS - 1),
            r"refused a valid 128-byte blob of float16 \(1, 2, 1, 2, 1, 2\).*reason='bad header'"
            r".*up to MAX_DIMS = 6 dimensions, 6 included",
        ),
        (decoder(ndim_high=False), "ndim is 7, .* was accepted: a shape has 1 to MAX_DIMS"),
        (
            decoder(too_short=lambda b: len(b) <= HEADER_SIZE),
            r"refused a valid 112-byte blob "
            r"of float32 \(0,\).*too short only when len\(blob\) < HEADER_SIZE",
        ),
        (
            decoder(ndim_high=False, padding=False, too_short=lambda b: False),
            "raised error: "
            r".*not CorruptBlock; check len\(blob\) < HEADER_SIZE before unpacking",
        ),
        (decoder(fp_bytes=8), "fingerprint differs .* only in byte 31 was accepted: compare all"),
        (decoder(bh_bytes=16), "block hash differs .* only in byte 20 was accepted: compare all"),
        (
            decoder(none_is_any=False),
            r"asked for fingerprint=None and block_hash=None \(reason='foreign "
            r"fingerprint'.*'accept any'",
        ),
        (decoder(swapped=True), r"returned \(payload, header\): return \(header, payload\)"),
        (crc_over_the_whole_header, r"refused a valid 136-byte blob .*reason='header checksum'"),
        (decoder(header_crc=False), "stored header CRC .* was accepted: compare zlib.crc32"),
        (decoder(payload_crc=False), "bit flipped in its payload was accepted: compare zlib"),
        (raises_its_own_corrupt_block, "a CorruptBlock of its own .*from paged_kv.errors"),
        (raises_value_error, r"raised ValueError: .*, not CorruptBlock; .* reason='truncated'"),
        (decoder(reason=lambda r: None), r"reason='corrupt', .*pass the reason: raise Corrupt"),
        (decoder(longer="truncated"), "a longer one 'length'"),
        (
            decoder(version_first=True),
            r"byte 4 \(the version\) xor 0x01: .*reason='version', "
            r"the library with reason='header checksum'; check 'header checksum'",
        ),
        (
            decoder(crc_first=True),
            r"byte 0 \(the magic\) xor 0x01: .*reason='header checksum'"
            r", the library with reason='bad magic'; check 'bad magic'",
        ),
    ],
)
def test_a_wrong_decode_fails_naming_its_mistake(decode_fn, mistake):
    with pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_blob_codec(encode, decode_fn)
    message = str(failure.value)
    assert message.startswith("Exercise 1 (encode, decode): ")
    assert "\n" not in message and "Traceback" not in message


def test_a_wrong_encode_fails_naming_its_mistake():
    def no_header_crc(payload, **kw):
        blob = encode(payload, **kw)
        return blob[:108] + b"\0\0\0\0" + blob[112:]

    with pytest.raises(CheckFailed, match=r"then CRC\.pack\(zlib\.crc32\(fields\)\)"):
        checks.check_blob_codec(no_header_crc, decode)

    def pads_with_ones(payload, *, dtype, shape, fingerprint, block_hash):
        padded = [*shape, *[1] * (MAX_DIMS - len(shape))]
        blob = encode(payload, dtype=dtype, shape=padded, fingerprint=fingerprint,
                      block_hash=block_hash)  # fmt: skip
        return blob[:7] + bytes([len(shape)]) + blob[8:]

    with pytest.raises(CheckFailed, match="the shape padded with zeros to 6 dims"):
        checks.check_blob_codec(pads_with_ones, decode)


# -- exercise 2: the longest run across tiers -------------------------------------------------


@contextlib.contextmanager
def no_hang(seconds=30):
    """Fail instead of hanging if the check ever stops guarding against endless loops."""

    def stop(signum, frame):
        raise TimeoutError("the check hung on an endless loop")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def destroys_the_keys(keys, tiers):
    sources = []
    while keys:
        for tier in tiers:
            n = tier.count_leading(keys)
            if n:
                sources += [tier] * n
                del keys[:n]
                break
        else:
            break
    return sources


def forgets_to_break(keys, tiers):
    sources = []
    while len(sources) < len(keys):
        for tier in tiers:
            n = tier.count_leading(keys[len(sources) :])
            if n:
                sources += [tier] * n
                break
    return sources


def spins_without_tiers(keys, tiers):
    sources = []
    while len(sources) < len(keys):
        found = False
        for tier in tiers:
            n = tier.count_leading(keys[len(sources) :])
            if n:
                sources += [tier] * n
                found = True
                break
        if tiers and not found:
            break
    return sources


def n_minus_one(keys, tiers):
    sources = []
    while len(sources) < len(keys):
        for tier in tiers:
            n = tier.count_leading(keys[len(sources) :])
            if n:
                sources += [tier] * (n - 1)
                break
        else:
            break
    return sources


def one_block_at_a_time(keys, tiers):
    sources = []
    for key in keys:
        tier = next((t for t in tiers if t.count_leading([key])), None)
        if tier is None:
            break
        sources.append(tier)
    return sources


def skips_gaps(keys, tiers):
    return [next(t for t in tiers if t.count_leading([k])) for k in keys
            if any(t.count_leading([k]) for t in tiers)]  # fmt: skip


def asks_everyone(keys, tiers):
    for tier in tiers:
        tier.count_leading(keys)
    return my_longest_run(keys, tiers)


def first_tier_only(keys, tiers):
    return [tiers[0]] * tiers[0].count_leading(keys) if tiers else []


def asks_about_one_key(keys, tiers):
    return [t for t in tiers[:1] if keys and t.count_leading(keys[0])]


@pytest.mark.parametrize(
    ("fn", "mistake"),
    [
        (
            destroys_the_keys,
            r"changed the list of keys it was given \(8 keys before the call, 3 after\)",
        ),
        (
            forgets_to_break,
            r"asked the tiers 85 times without returning, and a correct solution asks at most "
            r"27\. .*no tier has the next block .* break out of the loop",
        ),
        (
            spins_without_tiers,
            r"my_longest_run\(\['k0'.*\], \[\]\) with no tiers: your function ran 200,000 "
            "lines without returning",
        ),
        (n_minus_one, r"without returning.*take all n blocks.*\(sources \+= \[tier\] \* n\)"),
        (lambda k, t: [x.name for x in my_longest_run(k, t)], "returned tier names, \\['host'"),
        (lambda k, t: [(x, 1) for x in my_longest_run(k, t)], r"returned pairs, \[\(host, 1\)"),
        (lambda k, t: [(x.name, 1) for x in my_longest_run(k, t)], r"returned pairs"),
        (lambda k, t: tuple(my_longest_run(k, t)), r"returned a tuple, \(host, disk.*a list"),
        (
            one_block_at_a_time,
            r"got \[host, disk, disk, host, remote, remote\]: you took each "
            "block from the fastest tier that holds it, but the first tier holding the next block "
            "supplies its whole run of n blocks",
        ),
        (skips_gaps, "got .*: the run ends at k5, which no tier holds"),
        (asks_everyone, "the slower tiers must not be asked"),
        (first_tier_only, r"got \[host\]: the run stops too early: after 1 block\(s\), disk"),
        (asks_about_one_key, r"count_leading takes a list of keys"),
    ],
)
def test_a_wrong_run_fails_naming_its_mistake(fn, mistake):
    with no_hang(), pytest.raises(CheckFailed, match=mistake) as failure:
        checks.check_longest_run(fn)
    message = str(failure.value)
    assert message.startswith("Exercise 2 (my_longest_run): ")
    assert "\n" not in message and "Traceback" not in message
