"""Chapter 07 checks, judged by the library (`decode_blob`, `longest_run`, `CircuitBreaker`):
a blob codec that writes the chapter's format and refuses each bad blob with the reason of the
first check that fails; a run across tiers that asks no tier needlessly; a circuit breaker
that behaves alike after every call. Failures replay with `blobs()[i]`, `Tier`, `Clock()`."""

from __future__ import annotations

import hashlib
import random
import struct
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any, cast

from paged_kv.course.checks import causes
from paged_kv.course.checks.failures import (
    CheckFailed,
    call,
    exercise,
    passed,
    short_repr,
    where_raised,
)
from paged_kv.course.checks.harness import Trial, fixed, search
from paged_kv.errors import CorruptBlock
from paged_kv.tiers.breaker import CircuitBreaker
from paged_kv.tiers.codec import DTYPES, FORMAT_VERSION, HEADER_SIZE, MAX_DIMS, decode_blob
from paged_kv.tiers.codec import encode_blob as library_encode
from paged_kv.tiers.store import longest_run

# -- exercise 1: the blob codec ----------------------------------------------------------------

FIELDS = struct.Struct(f"<4sHBB{MAX_DIMS}I32s32sQI")
_AT = {
    "magic": 0,
    "version": 1,
    "code": 2,
    "ndim": 3,
    "dims": slice(4, 10),
    "length": 12,
    "crc": 13,
}
FP = hashlib.sha256(b"the learner's model").digest()
OTHER_FP = hashlib.sha256(b"someone else's model").digest()


def block_hash(i: int) -> bytes:
    return hashlib.sha256(f"block {i}".encode()).digest()


BH = block_hash(1)


def case(dtype: str, shape: tuple[int, ...], seed: int = 0, bh: bytes = BH) -> dict[str, Any]:
    """The keyword arguments of one encode: a payload of `shape` in `dtype`."""
    size = prod(shape) * DTYPES[dtype][1]
    payload = hashlib.shake_256(f"{seed} {shape}".encode()).digest(size) if size else b""
    return {"payload": payload, "dtype": dtype, "shape": shape, "fingerprint": FP, "block_hash": bh}


def craft(base: dict[str, Any] | None = None, payload: bytes | None = None, **fields: Any) -> bytes:
    """A blob of `base` (a `case`) with header `fields` replaced (the names of `_AT`), its
    header CRC made valid again, and `payload` (default: the case's) after it."""
    base = base or case("float32", (2, 3))
    values: list[Any] = list(FIELDS.unpack(library_encode(**base)[: FIELDS.size]))
    for name, value in fields.items():
        values[_AT[name]] = value
    packed = FIELDS.pack(*values)
    body = base["payload"] if payload is None else payload
    return packed + struct.pack("<I", zlib.crc32(packed)) + body


def flipped(blob: bytes, i: int, mask: int = 0x01) -> bytes:
    return blob[:i] + bytes([blob[i] ^ mask]) + blob[i + 1 :]


@dataclass(frozen=True)
class Blob:
    what: str
    blob: bytes
    fingerprint: bytes | None = FP
    block_hash: bytes | None = BH


def blobs() -> list[Blob]:
    """Valid blobs at the edges of the format, then blobs with one thing wrong (each needs its
    own check), then two (which check comes first), then every byte flipped three ways."""
    plain, longer = case("float32", (2, 3)), case("float32", (2, 3, 2), seed=1)
    w, w2, hs = library_encode(**plain), library_encode(**longer), HEADER_SIZE
    rng = random.Random(7)
    dims = lambda: tuple(rng.randint(1, 3) for _ in range(rng.randint(1, 6)))  # noqa: E731
    valid = [case(rng.choice(sorted(DTYPES)), dims(), i) for i in range(12)]
    valid += [case("float32", (0,)), case("int8", (2, 0, 3)), case("float16", (1, 2, 1, 2, 1, 2))]
    other, b7, big = (OTHER_FP, BH), (FP, block_hash(7)), plain["payload"] + bytes(4)
    rows: list[tuple[Any, ...]] = [
        *((f"a valid {c['dtype']} {c['shape']} blob", library_encode(**c)) for c in valid),
        ("a valid blob, fingerprint and block hash None (accept any)", w, None, None),
        ("a valid blob, fingerprint None (accept any)", w, None),
        *((f"a blob cut to {n} bytes", w[:n]) for n in (0, 50, hs - 1)),
        *((f"magic {m!r}", craft(magic=m)) for m in (b"XKVB", b"PKVb")),
        *((f"version {v}", craft(version=v)) for v in (FORMAT_VERSION + 1, 0)),
        *((f"dtype code {c}", craft(code=c)) for c in (0, len(DTYPES) + 1, 255)),
        ("ndim 0", craft(case("float32", (1,)), ndim=0, dims=(0,) * MAX_DIMS)),
        *((f"ndim {n}", craft(case("float32", (1,) * 5 + (2,)), ndim=n)) for n in (7, 255)),
        ("ndim 2, unused shape slot 5 holding 5", craft(dims=(2, 3, 0, 0, 5, 0))),
        ("float32 (2, 3) with 28 payload bytes", craft(length=28, payload=big,
                                                        crc=zlib.crc32(big))),
        ("a blob cut to its header", w[:hs]),
        ("a blob one byte short", w[:-1]),
        ("a blob one byte too long", w + b"\0"),
        ("another model's blob", w, OTHER_FP),
        *((f"a fingerprint differing in byte {i}", w, flipped(FP, i)) for i in (0, 31)),
        ("another block's blob", w, FP, block_hash(99)),
        *((f"a block hash differing in byte {i}", w, FP, flipped(BH, i)) for i in (0, 20, 31)),
        ("a bit flipped in the payload", flipped(w, hs + 5)),
        ("a bit flipped in the stored header CRC", flipped(w, hs - 1)),
        ("version 2 and dtype code 99", craft(longer, version=2, code=99)),
        ("a payload length of 52 for float32 (2, 3, 2)", craft(longer, length=52)),
        ("another model's blob of another block", w2, OTHER_FP, block_hash(7)),
        ("another block's blob, a payload bit flipped", flipped(w2, hs), *b7),
        ("another model's blob in version 2", craft(version=2), *other),
        ("another model's blob with a bad header", craft(code=0), *other),
        ("another model's blob, cut to its header", w[:hs], *other),
        ("another block's blob with a bad shape", craft(ndim=0), *b7),
        ("another block's blob, one byte too long", w + b"\0", *b7),
        *((f"byte {i} xor {m:#04x}", flipped(w2, i, m)) for i in range(len(w2))
          for m in (1, 128, 255)),
    ]  # fmt: skip
    return [Blob(*row) for row in rows]


# the reasons, in the order decode checks them (the table of the chapter)
REASONS = ("truncated", "bad magic", "header checksum", "version", "bad header", "length",
           "foreign fingerprint", "foreign block", "payload checksum")  # fmt: skip
_FIELD_ENDS = [(4, "the magic"), (6, "the version"), (7, "the dtype code"), (8, "ndim"),
               (32, "the shape"), (64, "the fingerprint"), (96, "the block hash"),
               (104, "the payload length"), (108, "the payload CRC"),
               (112, "the header CRC")]  # fmt: skip


def _outcome(decode: Callable[..., Any], blob: Blob) -> tuple[str, Any]:
    """("returned", what decode returned), ("refused", its CorruptBlock) or ("raised", any
    other error)."""
    try:
        keys = {"fingerprint": blob.fingerprint, "block_hash": blob.block_hash}
        return "returned", decode(blob.blob, **keys)
    except CorruptBlock as refusal:
        return "refused", refusal
    except NotImplementedError:
        raise
    except Exception as error:
        return "raised", error


def _order(reason: str, blob: bytes) -> int:
    short_payload = reason == "truncated" and len(blob) >= HEADER_SIZE
    return REASONS.index("length" if short_payload else reason)


@exercise(1, "encode, decode")
def check_blob_codec(encode: Callable[..., bytes], decode: Callable[..., Any]) -> None:
    """`encode(payload, dtype=, shape=, fingerprint=, block_hash=)` writes the chapter's blob
    format byte for byte; `decode(blob, fingerprint=, block_hash=)` returns what `decode_blob`
    returns, or raises CorruptBlock with its reason."""
    fixed(lambda trial: _encodes(trial, encode))
    line = "decode(b.blob, fingerprint=b.fingerprint, block_hash=b.block_hash)"
    for i, blob in enumerate(blobs()):
        found = _decode_difference(
            call(line, _outcome, decode, blob), _outcome(decode_blob, blob), blob
        )
        if found:
            cause, hint, fields = found
            raise CheckFailed(
                f"On {blob.what}: {causes.say(cause, hint, line=line, **fields)}\nReplay it:\n"
                "    from paged_kv.course.checks.ch07_beyond_one_process import blobs\n"
                f"    b = blobs()[{i}]  # {blob.what}\n    {line}", cause)  # fmt: skip
    passed("the chapter's blob format; every damaged or foreign blob refused, with its reason")


def _encodes(trial: Trial, encode: Callable[..., bytes]) -> None:
    for c in [case("float32", (2, 3)), case("float32", (0,)), case("bfloat16", (3,), 4),
              case("float16", (1, 2, 1, 2, 1, 2), 3)]:  # fmt: skip
        args = f"<{len(c['payload'])} bytes>, dtype={c['dtype']!r}, shape={c['shape']}"
        trial.same(f"encode({args}, fingerprint=FP, block_hash=BH)", lambda c=c: encode(**c),
                   lambda c=c: library_encode(**c), compare=_first_byte)  # fmt: skip


def _first_byte(got: Any, want: bytes) -> str | None:
    if not isinstance(got, bytes | bytearray):
        return "encode returns bytes"
    if bytes(got) == want:
        return None
    i = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), len(want))
    field = next((name for end, name in _FIELD_ENDS if i < end), "the payload")
    return (
        f"the first byte that differs is byte {i}, in {field}: pack FIELDS (magic, version, dtype "
        "code, ndim, the shape padded with zeros to 6 dims, fingerprint, block hash, payload "
        "length, zlib.crc32(payload)), then CRC.pack(zlib.crc32(fields)), then the payload"
    )


def _said(error: BaseException) -> str:
    if isinstance(error, CorruptBlock):
        return f"CorruptBlock(reason={error.reason!r})"
    return f"{type(error).__name__}: {error}"


def _decode_difference(
    got: tuple[str, Any], want: tuple[str, Any], blob: Blob
) -> tuple[str, str, dict[str, str]] | None:
    """(cause, what to do, the cause's fields), or None when decode did what decode_blob does."""
    (kind, mine), (wanted, theirs) = got, want
    if wanted == "returned" and kind != "returned":
        hint = ("A blob encode made passes every check: a None fingerprint or block hash means "
                "accept any, a shape may have a 0 or 6 dimensions")  # fmt: skip
        where = where_raised(mine) if kind == "raised" else ""
        return causes.RAISED, hint, {"error": _said(mine), "where": where}
    if wanted == "returned":
        if isinstance(mine, tuple | list) and tuple(mine) == theirs:
            return None
        hint = "Return (BlobHeader(...), payload): the header first, then the bytes after it"
        return causes.WRONG_RESULT, hint, {"got": short_repr(mine), "want": short_repr(theirs)}
    reason = f"CorruptBlock(reason={theirs.reason!r})"
    if kind == "returned":
        fields = {"want": reason, "why": "it is refused", "got": short_repr(mine)}
        hint = f"Raise CorruptBlock(message, reason={theirs.reason!r})"
        return causes.MISSING_REFUSAL, hint, fields
    if kind == "refused" and mine.reason == theirs.reason:
        return None
    fields = {"want": reason, "why": "the first check that fails names it", "error": _said(mine)}
    order = f"Check in the table's order: {', '.join(REASONS)}"
    earlier = kind == "refused" and mine.reason in REASONS
    if earlier and _order(mine.reason, blob.blob) > _order(theirs.reason, blob.blob):
        return causes.WRONG_CHECK_ORDER, order, fields
    hint = order if kind == "refused" else "Raise paged_kv.errors.CorruptBlock, with its reason"
    return causes.WRONG_ERROR, hint, {**fields, "where": ""}


# -- exercise 2: the longest run across tiers --------------------------------------------------

_LINES = 200_000  # Python lines one call may run; a correct solution runs a few dozen


class _Stuck(BaseException):
    """Stops an endless loop (not an Exception: `except Exception` cannot swallow it)."""


class Tier:
    """A tier holding `keys` that counts the questions it is asked."""

    def __init__(self, name: str, keys: Sequence[str]) -> None:
        self.name, self.keys, self.calls = name, set(keys), 0

    def count_leading(self, keys: Sequence[str]) -> int:
        self.calls += 1
        return next((i for i, key in enumerate(keys) if key not in self.keys), len(keys))

    def __repr__(self) -> str:
        return self.name


def _lines_capped(action: Callable[[], Any]) -> Any:
    lines = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal lines
        lines += event == "line"
        if lines > _LINES:
            raise _Stuck
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        return action()
    finally:
        sys.settrace(previous)


_RULE = (
    "Ask the tiers in order (fastest first) about the keys not covered yet; the first that "
    "answers n > 0 supplies the next n blocks, all of them; then ask again from the fastest; "
    "stop when no tier has the next block. Return the tier objects, one per block"
)


def _run_case(trial: Trial, fn: Callable[..., Any], keys: list[str], held: list[Any]) -> None:
    mine, theirs = [Tier(n, k) for n, k in held], [Tier(n, k) for n, k in held]
    trial.note("from paged_kv.course.checks.ch07_beyond_one_process import Tier")
    if held:
        trial.note(", ".join(f"{n} = Tier({n!r}, {k})" for n, k in held))
    line = f"{fn.__name__}({keys}, [{', '.join(n for n, _ in held)}])"
    given, tiers = trial.hand(keys), trial.hand(mine)

    def compare(got: Any, want: list[Tier]) -> str | None:
        names = [t.name for t in want]
        if isinstance(got, list) and all(any(x is t for t in mine) for x in got):
            return None if [t.name for t in got] == names else _RULE
        return f"{_RULE} (the list of the tier objects themselves, {names} here)"

    try:
        _lines_capped(lambda: trial.same(line, lambda: fn(given, tiers), lambda: longest_run(
            keys, cast("list[Any]", theirs)), compare=compare))  # fmt: skip
    except _Stuck:
        hint = "When no tier has the next block (or there are no tiers), the run is over"
        trial.fail(causes.ENDLESS_LOOP, hint, line=line)
    for tier, ref in zip(mine, theirs, strict=True):
        if tier.calls > ref.calls:
            trial.fail(causes.NEEDLESS_QUESTIONS, line=line, tier=tier.name, got=tier.calls,
                       want=ref.calls)  # fmt: skip


@exercise(2, "my_longest_run")
def check_longest_run(fn: Callable[[list[str], list[Any]], list[Any]]) -> None:
    """`fn(keys, tiers)` returns what `longest_run` returns (the tier to read each block of
    the longest run from), asking no tier more than it does, leaving the caller's lists alone."""
    keys = [f"k{i}" for i in range(8)]
    for ks, held in [
        (keys, [("host", ["k0", "k3"]), ("disk", keys[:3]), ("remote", ["k4", "k6", "k7"])]),
        (keys, [("host", ["k0", "k3"]), ("disk", keys[:4]), ("remote", ["k4", "k5"])]),
        ([], [("host", keys)]),
        (keys, []),
        (keys[5:], [("host", ["k0"]), ("disk", keys[:3])]),
        (keys[:6], [("host", keys[:6]), ("disk", keys)]),
    ]:
        fixed(lambda trial, ks=ks, held=held: _run_case(trial, fn, ks, held))

    def draw(rng: random.Random) -> list[Any]:
        ks = [f"x{i}" for i in range(rng.randint(0, 10))]
        names = rng.sample(["host", "disk", "remote"], rng.randint(1, 3))
        return [(ks, [(n, [k for k in ks if rng.random() < 0.5]) for n in names])]

    play = lambda ops, trial: _run_case(trial, fn, *ops[0])  # noqa: E731
    search(play, draw, trials=200, seed=5, what="check_longest_run")
    passed("the longest run across tiers, whole runs from the first tier, stopping at the gap")


# -- exercise 3: the circuit breaker -----------------------------------------------------------


class Clock:
    """A clock the check moves by hand: `clock.now += 0.5`."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


_AT_ONCE = 0.05  # seconds: an answer from allow() takes microseconds


def _breaker_steps(cls: type, ops: list[Any], trial: Trial) -> None:
    """ops[0] = (threshold, cooldown); then seconds to move the clock by, or a method name."""
    (threshold, cooldown), clock, ref_clock = ops[0], Clock(), Clock()
    trial.note("from paged_kv.course.checks.ch07_beyond_one_process import Clock")
    trial.note("clock = Clock()")
    line = f"breaker = {cls.__name__}({threshold}, {cooldown}, clock=clock)"
    mine = trial.run(line, cls, threshold, cooldown, clock=clock)
    ref = CircuitBreaker(threshold, cooldown, clock=ref_clock)
    for op in [None, *ops[1:]]:
        if isinstance(op, float) or (op and op.startswith("+")):
            clock.now += float(op)
            ref_clock.now += float(op)
            trial.note(f"clock.now += {float(op)}")
            continue
        if op:
            start = time.perf_counter()
            trial.same(f"breaker.{op}()", lambda op=op: getattr(mine, op)(), getattr(ref, op))
            if (took := time.perf_counter() - start) > _AT_ONCE:
                trial.fail(causes.SLOW_ANSWER, line=f"breaker.{op}()", seconds=took)
        trial.expect("breaker.state", trial.read("breaker.state", lambda: mine.state), ref.state)


# the exercise's scenario: "+s" moves the clock by s seconds, a word calls that method
_STEPS = (
    "allow record_failure allow record_failure allow record_success allow record_failure allow "
    "record_failure allow record_failure allow +1.99 allow +0.01 allow allow record_failure allow "
    "+2.0 allow record_success allow"
)
_SCENARIO: list[Any] = [(3, 2.0), *_STEPS.split()]
_OPS = ["allow"] * 4 + ["record_success", "record_failure", "record_failure", 0.1, 0.5, 1.0]


@exercise(3, "MyBreaker")
def check_circuit_breaker(cls: type) -> None:
    """`cls(failure_threshold, cooldown_s, clock=...)` answers `allow()`, `record_success()`,
    `record_failure()` and `state` as `CircuitBreaker` does after every call, in every state
    (a record_* may come while it is open: a call allowed before it opened ends late)."""
    fixed(lambda trial: _breaker_steps(cls, _SCENARIO, trial))

    def refuses_a_zero_threshold(trial: Trial) -> None:
        line = f"{cls.__name__}(0, 1.0, clock=Clock())"
        trial.same(line, lambda: cls(0, 1.0, clock=Clock()), lambda: CircuitBreaker(0, 1.0))

    fixed(refuses_a_zero_threshold)

    def draw(rng: random.Random) -> list[Any]:
        return [(rng.randint(1, 4), rng.choice([0.0, 0.5, 1.0])), *rng.choices(_OPS, k=30)]

    play = lambda ops, trial: _breaker_steps(cls, ops, trial)  # noqa: E731
    search(play, draw, trials=100, seed=11, what="check_circuit_breaker")
    passed("opens, waits and closes like the library's, on 100 random runs")
