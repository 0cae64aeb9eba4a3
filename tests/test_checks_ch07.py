"""Chapter 07's checks pass the library and catch the mistakes a learner makes."""

from __future__ import annotations

import sys

import pytest

from paged_kv.course import checks
from paged_kv.errors import CorruptBlock
from paged_kv.tiers import CircuitBreaker, decode_blob, encode_blob, longest_run, read_header
from paged_kv.tiers.breaker import CLOSED, OPEN


def test_the_library_passes_every_chapter_07_check():
    checks.check_blob_codec(encode_blob, decode_blob)
    checks.check_longest_run(longest_run)
    checks.check_circuit_breaker(CircuitBreaker)


def test_a_decode_that_trusts_the_payload_is_caught():
    def trusting(blob, *, fingerprint, block_hash):
        header = read_header(blob)
        if len(blob) - 112 != header.payload_length:
            short = len(blob) - 112 < header.payload_length
            raise CorruptBlock("length", reason="truncated" if short else "length")
        if fingerprint is not None and header.fingerprint != fingerprint:
            raise CorruptBlock("fp", reason="foreign fingerprint")
        if block_hash is not None and header.block_hash != block_hash:
            raise CorruptBlock("hash", reason="foreign block")
        return header, memoryview(blob)[112:]  # no payload checksum

    with pytest.raises(checks.CheckFailed, match=r"bit flipped in its payload was accepted"):
        checks.check_blob_codec(encode_blob, trusting)


def test_a_decode_that_forgets_the_fingerprint_or_raises_the_wrong_error_is_caught():
    def foreign_welcome(blob, *, fingerprint, block_hash):
        return decode_blob(blob, fingerprint=None, block_hash=block_hash)

    with pytest.raises(checks.CheckFailed, match="another model's fingerprint"):
        checks.check_blob_codec(encode_blob, foreign_welcome)

    def value_error(blob, *, fingerprint, block_hash):
        try:
            return decode_blob(blob, fingerprint=fingerprint, block_hash=block_hash)
        except CorruptBlock as err:
            raise ValueError(str(err)) from None

    with pytest.raises(checks.CheckFailed, match="raise CorruptBlock"):
        checks.check_blob_codec(encode_blob, value_error)


def test_an_encode_that_drops_the_header_checksum_is_caught():
    def no_header_crc(payload, **kw):
        blob = encode_blob(payload, **kw)
        return blob[:108] + b"\0\0\0\0" + blob[112:]

    with pytest.raises(checks.CheckFailed, match=r"CRC\.pack"):
        checks.check_blob_codec(no_header_crc, decode_blob)


def test_a_run_that_skips_gaps_or_asks_every_tier_is_caught():
    def skips_gaps(keys, tiers):
        return [next(t for t in tiers if t.count_leading([k])) for k in keys
                if any(t.count_leading([k]) for t in tiers)]  # fmt: skip

    with pytest.raises(checks.CheckFailed, match="stops at k5"):
        checks.check_longest_run(skips_gaps)

    def asks_everyone(keys, tiers):
        for tier in tiers:
            tier.count_leading(keys)
        return longest_run(keys, tiers)

    with pytest.raises(checks.CheckFailed, match="must not be asked"):
        checks.check_longest_run(asks_everyone)

    def first_tier_only(keys, tiers):
        return [tiers[0]] * tiers[0].count_leading(keys) if tiers else []

    with pytest.raises(checks.CheckFailed, match=r"expected \[host, disk, disk, host, remote\]"):
        checks.check_longest_run(first_tier_only)


class NeverHalfOpen(CircuitBreaker):
    def allow(self):
        return self.state == CLOSED


class NoReset(CircuitBreaker):
    def record_success(self):
        with self._lock:
            self.state = CLOSED  # forgets to reset the count of failures


class ManyTrials(CircuitBreaker):
    def allow(self):
        if self.state == OPEN and self.clock() - self.opened_at >= self.cooldown_s:
            self.state = "half-open"
        return self.state != OPEN


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (NeverHalfOpen, "one trial call is allowed"),
        (NoReset, "in a row"),
        (ManyTrials, "only one trial call"),
    ],
)
def test_broken_breakers_are_caught(cls, message):
    with pytest.raises(checks.CheckFailed, match=message):
        checks.check_circuit_breaker(cls)


def test_a_stub_surfaces_as_not_implemented():
    def stub(*args, **kwargs):
        raise NotImplementedError("exercise")

    with pytest.raises(NotImplementedError):
        checks.check_blob_codec(stub, decode_blob)
    with pytest.raises(NotImplementedError):
        checks.check_longest_run(stub)
    with pytest.raises(NotImplementedError):
        checks.check_circuit_breaker(stub)


def test_the_guard_against_endless_loops_gives_back_the_tracer():
    def endless(keys, tiers):
        while True:
            pass

    before = sys.gettrace()
    checks.check_longest_run(longest_run)
    assert sys.gettrace() is before
    with pytest.raises(checks.CheckFailed, match="ran 200,000 lines without returning"):
        checks.check_longest_run(endless)
    assert sys.gettrace() is before
