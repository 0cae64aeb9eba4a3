"""Chapter 07 checks, judged by the library (`decode_blob`, `longest_run`, `CircuitBreaker`);
a failure replays with the `blobs()[i]` or the `Tier`s of this module."""

from __future__ import annotations

import hashlib
import random
import struct
import time
import zlib
from collections import namedtuple
from collections.abc import Callable, Sequence
from functools import partial
from math import prod
from typing import Any

from paged_kv.course.checks import causes
from paged_kv.course.checks.cost import TooManyLines, count_lines_executed
from paged_kv.course.checks.failures import exercise, passed
from paged_kv.course.checks.harness import Trial, fixed, search
from paged_kv.errors import CorruptBlock, InvalidArgument
from paged_kv.tiers.breaker import CircuitBreaker
from paged_kv.tiers.codec import DTYPES, FORMAT_VERSION, HEADER_SIZE, MAX_DIMS, decode_blob
from paged_kv.tiers.codec import encode_blob as library_encode
from paged_kv.tiers.store import longest_run

# -- exercise 1: the blob codec ----------------------------------------------------------------

FIELDS = struct.Struct(f"<4sHBB{MAX_DIMS}I32s32sQI")
_AT = dict(magic=0, version=1, code=2, ndim=3, dims=slice(4, 10), length=12, crc=13)
FP, OTHER_FP, BH, OTHER_BH = (hashlib.sha256(b"%d" % i).digest() for i in range(4))
Blob = namedtuple("Blob", "what blob fingerprint block_hash case", defaults=(FP, BH, None))
REASONS = (  # the reasons, in the order decode checks them (the table of the chapter)
    *("truncated", "bad magic", "header checksum", "version", "bad header", "length"),
    *("foreign fingerprint", "foreign block", "payload checksum"),
)
_ROW = {reason: row for row, reason in enumerate(REASONS)}
_ORDER = "Raise CorruptBlock(message, reason=...), checking in this order: " + ", ".join(REASONS)
_LAYOUT = "magic 0-3, version 4-5, dtype 6, ndim 7, shape 8-31, fingerprint 32-63, block hash "
_LAYOUT += "64-95, payload length 96-103, payload CRC 104-107, header CRC 108-111"


def case(dtype: str, shape: tuple[int, ...], seed: int = 0) -> dict[str, Any]:
    """The keyword arguments of one encode: a payload of `shape` in `dtype`."""
    payload = hashlib.shake_256(f"{seed} {shape}".encode()).digest(prod(shape) * DTYPES[dtype][1])
    return {"payload": payload, "dtype": dtype, "shape": shape, "fingerprint": FP, "block_hash": BH}


def craft(base: dict[str, Any] | None = None, payload: bytes = b"", **fields: Any) -> bytes:
    """`base`'s blob (a `case`), its header `fields` (names of `_AT`) replaced, CRC made valid."""
    base = base or case("float32", (2, 3))
    values: list[Any] = list(FIELDS.unpack_from(library_encode(**base)))
    for name, value in fields.items():
        values[_AT[name]] = value
    packed = FIELDS.pack(*values)
    return packed + struct.pack("<I", zlib.crc32(packed)) + (payload or base["payload"])


def blobs() -> list[Blob]:
    """Valid blobs at the edges of the format; blobs with one thing wrong or two (which check is
    first), each also asked for by another model or as another block; every byte flipped."""
    plain, longer = case("float32", (2, 3)), case("float32", (2, 3, 2), seed=1)
    w, w2, hs, big = library_encode(**plain), library_encode(**longer), HEADER_SIZE, bytes(28)
    flip = lambda b, i, mask=1: b[:i] + bytes([b[i] ^ mask]) + b[i + 1 :]  # noqa: E731
    rng = random.Random(7)
    dims = lambda: tuple(rng.randint(1, 3) for _ in range(rng.randint(1, 6)))  # noqa: E731
    valid = [case(rng.choice(sorted(DTYPES)), dims(), i) for i in range(12)]
    valid += [case("float32", (0,)), case("int8", (2, 0, 3)), case("float16", (1, 2, 1, 2, 1, 2))]
    damaged = [
        *((f"a blob cut to {n} bytes", w[:n]) for n in (0, 50, hs - 1, hs, len(w) - 1)),
        ("a blob one byte too long", w + b"\0"),
        *((f"magic {m!r}", craft(magic=m)) for m in (b"XKVB", b"PKVb")),
        ("a bit flipped in the stored header CRC", flip(w, hs - 1)),
        ("a bit flipped in the payload", flip(w, hs + 5)),
        *((f"version {v}", craft(version=v)) for v in (FORMAT_VERSION + 1, 0)),
        *((f"dtype code {c}", craft(code=c)) for c in (0, len(DTYPES) + 1, 255)),
        ("ndim 0", craft(case("float32", (1,)), ndim=0, dims=(0,) * MAX_DIMS)),
        *((f"ndim {n}", craft(case("float32", (1,) * 5 + (2,)), ndim=n)) for n in (7, 255)),
        ("ndim 2, unused shape slot 5 holding 5", craft(dims=(2, 3, 0, 0, 5, 0))),
        ("float32 (2, 3), 28 payload bytes", craft(length=28, payload=big, crc=zlib.crc32(big))),
        ("another version, dtype code 99", craft(longer, version=FORMAT_VERSION + 1, code=99)),
        ("a payload length of 52 for float32 (2, 3, 2)", craft(longer, length=52)),
    ]
    foreign = {"by another model": (OTHER_FP, BH), "as another block": (FP, OTHER_BH)}
    foreign["by another model, as another block"] = (OTHER_FP, OTHER_BH)
    rows = [
        (f"a valid {c['dtype']} {c['shape']} blob", library_encode(**c), FP, BH, c) for c in valid
    ]
    rows += [("a valid blob, fingerprint and block hash None (accept any)", w, None, None)]
    rows += [("a valid blob, fingerprint None (accept any)", w, None), *damaged]
    for what, b in [("a valid blob", w), *damaged]:
        rows += [(f"{what}, asked for {by}", b, *keys) for by, keys in foreign.items()]
    rows += [(f"a fingerprint differing in byte {i}", w, flip(FP, i)) for i in (0, 31)]
    rows += [(f"a block hash differing in byte {i}", w, FP, flip(BH, i)) for i in (0, 20, 31)]
    for i in range(len(w2)):
        rows += [(f"byte {i} xor {m:#04x}", flip(w2, i, m)) for m in (1, 128, 255)]
    return [Blob(*row) for row in rows]


@exercise(1, "encode, decode")
def check_blob_codec(encode: Callable[..., bytes], decode: Callable[..., Any]) -> None:
    """`encode(payload, dtype=, shape=, fingerprint=, block_hash=)` gives the library's blob byte
    for byte; `decode(blob, fingerprint=, block_hash=)` does what `decode_blob` does."""
    for i, blob in enumerate(blobs()):
        fixed(partial(_codec, encode, decode, i, blob))
    passed("the chapter's blob format; every damaged or foreign blob refused, with its reason")


def _codec(encode: Callable, decode: Callable, i: int, b: Blob, trial: Trial) -> None:
    """`encode(**b.case)` gives the library's blob; `decode(b.blob, ...)` returns what
    decode_blob returns, or refuses with its reason (a later row's is `wrong_check_order`)."""
    trial.note(f"from {__name__} import blobs")
    trial.note(f"b = blobs()[{i}]  # {b.what}")
    if b.case:
        encoded = f"{encode.__name__}(**b.case)"
        trial.same(encoded, lambda: encode(**b.case), lambda: b.blob, compare=_first_byte)
    line = f"{decode.__name__}(b.blob, fingerprint=b.fingerprint, block_hash=b.block_hash)"
    mine = lambda: decode(b.blob, fingerprint=b.fingerprint, block_hash=b.block_hash)  # noqa: E731
    try:
        want = decode_blob(b.blob, fingerprint=b.fingerprint, block_hash=b.block_hash)
    except CorruptBlock as refusal:
        why = f"the first check that fails names it, {refusal.reason!r}"
        said = getattr(trial.refuses(line, mine, refusal, why=why, hint=_ORDER), "reason", None)
        row = _ROW | {"truncated": 0 if len(b.blob) < HEADER_SIZE else _ROW["length"]}
        if said in REASONS and row[said] > row[refusal.reason]:  # a later row refused it
            wanted, got = (f"CorruptBlock(reason={r!r})" for r in (refusal.reason, said))
            trial.fail(causes.WRONG_CHECK_ORDER, _ORDER, line=line, why=why, want=wanted, error=got)
        return
    trial.same(line, mine, lambda: want, hint="Return (BlobHeader(...), payload), header first")


def _first_byte(got: Any, want: bytes) -> str | None:
    if not isinstance(got, bytes | bytearray):
        return "encode returns bytes"
    i = next((i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b), len(want))
    return None if want == bytes(got) else f"byte {i} differs first (the header: {_LAYOUT})"


# -- exercise 2: the longest run across tiers --------------------------------------------------

_RULE = "Return a list of the tier objects, one per block: ask the tiers, fastest first, about "
_RULE += "the keys not covered yet; the first to answer n > 0 supplies the next n blocks; stop at "
_RULE += "a block no tier has"


class Tier:
    """A tier holding `keys` that counts the questions it is asked."""

    def __init__(self, name: str, keys: Sequence[str]) -> None:
        self.name, self.keys, self.calls = name, set(keys), 0

    def count_leading(self, keys: Sequence[str]) -> int:
        self.calls += 1
        return next((i for i, key in enumerate(keys) if key not in self.keys), len(keys))

    def __repr__(self) -> str:
        return self.name


def _run_case(trial: Trial, fn: Callable[..., Any], keys: list[str], held: list[Any]) -> None:
    """`fn(keys, tiers)` gives the library's run, asking no tier more often than it does."""
    tiers: list[Any] = [Tier(n, k) for n, k in held]
    want, asked = longest_run(keys, tiers), [t.calls for t in tiers]
    for tier in tiers:
        tier.calls = 0
    trial.note(f"from {__name__} import Tier")
    trial.note("; ".join(f"{n} = Tier({n!r}, {k})" for n, k in held))
    line = f"{fn.__name__}({keys}, [{', '.join(n for n, _ in held)}])"
    given, handed = trial.hand(keys), trial.hand(tiers)
    try:  # a correct solution runs a few dozen lines
        count_lines_executed(
            lambda: trial.same(line, lambda: fn(given, handed), lambda: want, hint=_RULE), 200_000
        )
    except TooManyLines:
        hint = "When no tier has the next block (or there are no tiers), the run is over"
        trial.fail(causes.ENDLESS_LOOP, hint, line=line)
    for tier, n in zip(tiers, asked, strict=True):
        if tier.calls > n:
            trial.fail(causes.NEEDLESS_QUESTIONS, line=line, tier=tier, got=tier.calls, want=n)


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

_AT_ONCE = 0.05  # seconds: an answer from allow() takes microseconds
_RULES = (
    "The rules: allow() is True when closed; when open, False until self.clock() shows cooldown_s "
    "passed (exactly cooldown_s counts), then the breaker is half-open and that one call is True; "
    "when half-open, False. record_success() closes from any state, the count of failures back "
    "to 0; record_failure() counts one more in a row and opens (a new cooldown, the count back "
    "to 0) when half-open or at failure_threshold in a row"
)
# (threshold, cooldown), then "+s" moves the clock by s seconds, a word calls that method
_STEPS = "allow record_failure allow record_failure allow record_success allow record_failure "
_STEPS += "allow record_failure allow record_failure allow +1.99 allow +0.01 allow allow "
_STEPS += "record_failure allow +2.0 allow record_success allow"
_SCENARIOS = ([(3, 2.0), *_STEPS.split()], [(0, 1.0)])  # the exercise's; a threshold refused
_OPS = ["allow"] * 4 + ["record_success", "record_failure", "record_failure", "+0.1", "+0.5", "+1"]


def _breaker_steps(cls: type, ops: list[Any], trial: Trial) -> None:
    (threshold, cooldown), now = ops[0], [100.0]
    trial.note("now = [100.0]  # the time, which the check moves by hand")
    new = lambda kind: lambda: kind(threshold, cooldown, clock=lambda: now[0])  # noqa: E731
    line = f"breaker = {cls.__name__}({threshold}, {cooldown}, clock=lambda: now[0])"
    mine, ref = trial.same(line, new(cls), new(CircuitBreaker), compare=lambda got, want: None)
    if isinstance(ref, InvalidArgument):
        return
    for op in ["", *ops[1:]]:
        if op.startswith("+"):
            now[0] += float(op)
            trial.note(f"now[0] += {op[1:]}")
            continue
        if op:
            start = time.perf_counter()
            trial.same(
                f"breaker.{op}()", lambda op=op: getattr(mine, op)(), getattr(ref, op), hint=_RULES
            )
            if (took := time.perf_counter() - start) > _AT_ONCE:
                trial.fail(causes.SLOW_ANSWER, line=f"breaker.{op}()", seconds=took)
        trial.expect(
            "breaker.state", trial.read("breaker.state", lambda: mine.state), ref.state, hint=_RULES
        )


@exercise(3, "MyBreaker")
def check_circuit_breaker(cls: type) -> None:
    """`cls(failure_threshold, cooldown_s, clock=...)` answers `allow()`, `record_*()` and `state`
    as `CircuitBreaker` does, in every state (a record_* while open: a late call's result)."""
    play = partial(_breaker_steps, cls)
    for scenario in _SCENARIOS:
        fixed(partial(play, scenario))
    sizes = lambda rng: (rng.randint(1, 4), rng.choice([0, 0.5, 1]))  # noqa: E731
    draw = lambda rng: [sizes(rng), *rng.choices(_OPS, k=30)]  # noqa: E731
    search(play, draw, trials=100, seed=11, what="check_circuit_breaker")
    passed("opens, waits and closes like the library's, on 100 random runs")
