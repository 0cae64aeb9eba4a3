"""Exercise 1 of chapter 04: the chained block hash, salted, over an encoding in which no two
different inputs collide, one block hashed per block (the work is counted), the caller's list
left as it was, and the same in a fresh process with another PYTHONHASHSEED (the learner's cell
is run again there, as `parts.save` keeps it: its imports and definitions)."""

from __future__ import annotations

import inspect
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from paged_kv.course.checks import causes
from paged_kv.course.checks.cost import Meter, count_lines_executed, counting
from paged_kv.course.checks.failures import CheckFailed, call, exercise, expect, passed
from paged_kv.errors import InvalidArgument

_IN_SUBPROCESS = "PAGED_KV_CHECK_SUBPROCESS"


@exercise(1, "chained_hashes")
def check_chained_hash(fn: Callable[..., list[bytes]]) -> None:
    """`fn(token_ids, block_size, salt=None)` returns one stable hash per full block, chained,
    over an encoding in which no two different inputs collide."""
    if os.environ.get(_IN_SUBPROCESS):
        return  # the learner's cell, re-run in a fresh process by this very check
    _expect_signature(fn)

    def h(tokens: list[int], size: int, salt: str | None = None) -> list[bytes]:
        salted = f", salt={salt!r}" if salt is not None else ""
        line = f"chained_hashes({tokens}, {size}{salted})"
        given = list(tokens)
        out = call(line, fn, given, size, **({} if salt is None else {"salt": salt}))
        out = list(out) if isinstance(out, tuple) else out
        expect(
            given == tokens,
            f"{line} changed the token_ids list it was given (before the call {_shown(tokens)}, "
            f"after it {_shown(given)}): the list is the caller's prompt, which it keeps "
            "using; read it (slice it, token_ids[start : start + block_size]), never change it.",
            causes.MUTATES_ARGUMENT,
        )
        return out

    out = h(list(range(10)), 4)
    expect(
        isinstance(out, list) and len(out) == 2,
        "chained_hashes(list(range(10)), 4) should return a list of 2 hashes (10 tokens make 2 "
        f"full blocks of 4; a partial block has no hash), got {_shown(out)}.",
        causes.WRONG_RESULT,
    )
    _expect_digests(out)
    expect(
        h([], 4) == [] and h([1, 2, 3], 4) == [],
        "fewer tokens than a block: no hash ([]).",
        causes.WRONG_RESULT,
    )
    expect(
        h(list(range(10)), 4) == out,
        "hashing the same tokens twice must give the same hashes.",
        causes.WRONG_RESULT,
    )
    same = h([1, 2, 3, 4, 1, 2, 3, 4], 4)
    expect(
        same[0] != same[1],
        "chained_hashes([1, 2, 3, 4, 1, 2, 3, 4], 4): the two blocks hold the same tokens, but "
        "the second hash must differ, because it names everything before it too (chain the "
        "parent's hash in).",
        causes.WRONG_RESULT,
    )
    expect(
        h([9, 2, 3, 4, 5, 6, 7, 8], 4)[1] != h([1, 2, 3, 4, 5, 6, 7, 8], 4)[1],
        "[9, 2, 3, 4, 5, 6, 7, 8] and [1, 2, 3, 4, 5, 6, 7, 8] share their second block but not "
        "their first: their second hashes must differ, or a hit on block 2 alone would splice "
        "in K/V computed after other tokens.",
        causes.WRONG_RESULT,
    )
    expect(
        h([1, 2, 3, 4, 5, 6, 7, 8], 4)[:1] == h([1, 2, 3, 4, 0, 0, 0, 0], 4)[:1],
        "prompts that share their first block must share its hash.",
        causes.WRONG_RESULT,
    )
    for a, b, why in _COLLISIONS:
        expect(
            h(a, 2) != h(b, 2),
            f"chained_hashes({a}, 2) == chained_hashes({b}, 2): different blocks, same hash. "
            + why,
            causes.WRONG_RESULT,
        )
    plain = h(list(range(8)), 4)
    salted = h(list(range(8)), 4, "tenant-a")
    expect(
        salted[0] != plain[0] and salted[1] != plain[1],
        "salt='tenant-a' must change every hash of the chain (mix it into the first block's).",
        causes.WRONG_RESULT,
    )
    expect(
        salted == h(list(range(8)), 4, "tenant-a"),
        "the same salt must give the same hashes.",
        causes.WRONG_RESULT,
    )
    expect(
        salted != h(list(range(8)), 4, "tenant-b"),
        "two salts must give different hashes.",
        causes.WRONG_RESULT,
    )
    expect(
        h(list(range(8)), 4, "") != plain,
        "salt='' and no salt (None) give the same hashes: an empty salt is still a salt. Encode "
        "whether there is one, not only its bytes ((salt or '').encode() cannot tell them apart).",
        causes.WRONG_RESULT,
    )
    expect(
        h(list(range(8)), 4, "None") != plain,
        "salt='None' and no salt (None) give the same hashes: str(salt) turns None into 'None', "
        "so a tenant named 'None' would share every other request's blocks. Encode whether "
        "there is a salt (a tag for None), then the salt's bytes.",
        causes.WRONG_RESULT,
    )
    _random_collisions(h)
    _one_hash_per_block(fn)
    _same_in_other_processes(fn)
    passed(
        "chained, salted, collision-free on the probes, one hash per block, the same in other "
        "processes"
    )


def _expect_signature(fn: Callable[..., Any]) -> None:
    """`fn(token_ids, block_size)` and `fn(token_ids, block_size, salt=...)` must both bind."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or a callable without one: let the calls tell
        return
    for args, kwargs in (([], 4), {}), (([], 4), {"salt": "a"}):
        try:
            signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise CheckFailed(
                f"{fn.__name__}{signature} cannot be called as chained_hashes(token_ids, "
                f"block_size{', salt=...' if kwargs else ''}) ({exc}): it must take "
                "(token_ids, block_size, salt=None), the salt optional with the default None "
                "(most requests have no salt, and their callers leave it out).",
                causes.BAD_SIGNATURE,
            ) from None


def _expect_digests(out: list[Any]) -> None:
    """Each hash is a whole digest: bytes, at least 16 of them."""
    wrong = [x for x in out if not isinstance(x, bytes)]
    if wrong and isinstance(wrong[0], str):
        raise CheckFailed(
            f"each hash should be bytes, but yours are str ({_shown(wrong[0])}): return "
            ".digest() (32 bytes), not .hexdigest() (its text).",
            causes.WRONG_RESULT,
        )
    if wrong:
        raise CheckFailed(
            f"each hash should be bytes (a hashlib digest), got {type(wrong[0]).__name__} "
            f"values: {_shown(out)}. Use hashlib.sha256(...).digest(), never hash().",
            causes.WRONG_RESULT,
        )
    short = next((x for x in out if len(x) < 16), None)
    if short is not None:
        raise CheckFailed(
            f"each hash should be a whole digest, but yours are {len(short)} bytes "
            f"({_shown(short)}): keep all 32 bytes of hashlib.sha256(...).digest() (never "
            "truncate it, and never use Python's hash(), 8 bytes that change between "
            f"processes). With {8 * len(short)} bits, two of the blocks a server caches over "
            "its life will collide, and a hit would read another prompt's K/V.",
            causes.WRONG_RESULT,
        )


_WORK_SIZES = (256, 4096)  # tokens, in blocks of 4: 64 and 1,024 blocks


def _one_hash_per_block(fn: Callable[..., Any]) -> None:
    """The work per block (Python lines run, plus the token ids read from the list) must not
    grow with the prompt: each block is hashed once, its parent's digest standing for all
    that came before it."""
    per_block = []
    for n in _WORK_SIZES:
        meter = Meter()
        tokens = counting(list(range(n)), meter, "token_ids")
        line = f"chained_hashes(list(range({n})), 4)"
        lines = count_lines_executed(lambda t=tokens, d=line: call(d, fn, t, 4))
        per_block.append((lines + meter.total) / (n // 4))
    small, large = per_block
    if large > 2.5 * small + 10:
        raise CheckFailed(
            f"hashing {_WORK_SIZES[0]} tokens cost {small:,.0f} per block (Python lines run plus "
            f"token ids read), but {_WORK_SIZES[1]:,} tokens cost {large:,.0f} per block: your "
            "work per block grows with the prompt, as if each block re-hashed (or re-read) "
            "everything before it. Hash each block once: sha256(parent + that block's "
            "encoding), where the parent's digest already names the whole prefix.",
            causes.WORK_GROWS,
        )


_COLLISIONS = [
    (
        [1, 256],
        [1, 0],
        "Token ids go up to the vocabulary size (over 100,000 in real models): "
        "encode each id whole, not only its low byte.",
    ),
    (
        [300_000, 1],
        [300_000 % 65_536, 1],
        "Two bytes per id are not enough for a vocabulary of "
        "300,000: give each id a fixed width that holds it (8 bytes: struct.pack('<q', id)).",
    ),
    (
        [1, 23],
        [12, 3],
        "Decimal digits joined with no separator are ambiguous: '1'+'23' == "
        "'12'+'3'. Use a fixed-width encoding, or separators.",
    ),
]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 160 else text[:150] + "…"


def _random_collisions(h: Callable[..., list[bytes]]) -> None:
    rng = random.Random(0)
    alphabet = [0, 1, 2, 3, 12, 23, 255, 256, 257, 65_536, 300_000]
    seen: dict[bytes, tuple] = {}
    for _ in range(300):
        tokens = [rng.choice(alphabet) for _ in range(rng.randint(1, 8))]
        for i, digest in enumerate(h(tokens, 2)):
            prefix = tuple(tokens[: (i + 1) * 2])
            expect(
                seen.setdefault(digest, prefix) == prefix,
                f"prefixes {list(seen[digest])} and {list(prefix)} got the same hash "
                f"(block_size 2): a collision. Make the encoding of a block unambiguous.",
                causes.WRONG_RESULT,
            )


def _same_in_other_processes(fn: Callable[..., list[bytes]]) -> None:
    """Re-run the learner's function in fresh processes with other PYTHONHASHSEEDs."""
    cases = [[list(range(8)), 4, "tenant-a"], [[5, 6, 7, 8], 2, None]]
    here = [
        [
            x.hex()
            for x in call(
                f"chained_hashes({t}, {size}, salt={salt!r})", fn, list(t), size, salt=salt
            )
        ]
        for t, size, salt in cases
    ]
    source = _cell_source(fn)
    for seed in ("1", "2"):
        theirs = _run_elsewhere(source, fn.__name__, cases, seed)
        if theirs != here:
            raise CheckFailed(
                f"chained_hashes(list(range(8)), 4, salt='tenant-a') gives other hashes in a "
                f"fresh Python process with PYTHONHASHSEED={seed}: a server restarted, or a "
                "second server, would never hit the cache, and two processes could disagree on "
                "what a hash means. Python's hash() of a str (or bytes) changes with "
                "PYTHONHASHSEED; hash only bytes you build yourself, with hashlib.",
                causes.WRONG_RESULT,
            )


def _cell_source(fn: Callable[..., Any]) -> str:
    """What `parts.save` would keep of `fn`'s cell: its imports and definitions, with the
    helper functions it calls from other cells (no test lines, no magics)."""
    from paged_kv.course.parts import _source_of

    if fn.__qualname__ != fn.__name__:
        raise CheckFailed(
            f"define {fn.__name__} at the top level of its cell (not inside another function "
            "or class), so the check can run it in another process.",
            causes.WRONG_RESULT,
        )
    try:
        return _source_of(fn)
    except (InvalidArgument, SyntaxError):
        raise CheckFailed(
            f"cannot read the source of {fn.__name__} to run it in another process; define it "
            "in a notebook cell or a .py file.",
            causes.WRONG_RESULT,
        ) from None


_RUNNER = """
import json, sys
job = json.load(sys.stdin)
namespace = {"__name__": "__learner__"}
exec(compile(job["source"], "<your cell>", "exec"), namespace)
fn = namespace[job["name"]]
out = [[h.hex() for h in fn(list(t), size, salt=salt)] for t, size, salt in job["cases"]]
print("\\n" + json.dumps(out))
"""


def _run_elsewhere(source: str, name: str, cases: list, seed: str) -> Any:
    env = {**os.environ, "PYTHONHASHSEED": seed, _IN_SUBPROCESS: "1"}
    job = json.dumps({"source": source, "name": name, "cases": cases})
    done = subprocess.run(
        [sys.executable, "-c", _RUNNER],
        input=job,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        advice = (
            f"Define every name {name} needs (imports, constants, helpers) in its own cell, and "
            "move test lines that use other cells' variables to the cell below."
            if last.startswith("NameError")
            else f"Keep {name} and everything it needs (imports, helpers) in one cell."
        )
        raise CheckFailed(
            f"running your cell again in a fresh Python process (to compare the hashes across "
            f"processes) failed: {last}. The check runs what parts.save keeps of the cell, its "
            f"imports and definitions, alone. {advice}",
            causes.WRONG_RESULT,
        )
    return json.loads(done.stdout.strip().splitlines()[-1])
