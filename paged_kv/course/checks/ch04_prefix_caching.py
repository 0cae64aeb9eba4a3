"""Chapter 04 checks: the chained block hash and its encoding, the longest cached prefix, and
the all-or-nothing add that shares it (fit check before any reference).

The learner's three parts plug into `KVCacheManager(block_hasher=, prefix_lookup=,
allocate_table=)`; `check_prefix_parts` runs them there against the library's own.
"""

from __future__ import annotations

import json
import linecache
import os
import random
import subprocess
import sys
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from paged_kv.cache.block_pool import BlockPool
from paged_kv.cache.eviction import LRU
from paged_kv.cache.hashing import block_hashes
from paged_kv.cache.prefix_cache import PrefixCache
from paged_kv.course.checks.support import (
    CheckFailed,
    Replay,
    call,
    exercise,
    expect,
    expect_raises,
    fixed,
    passed,
    search,
)
from paged_kv.errors import OutOfBlocks

_IN_SUBPROCESS = "PAGED_KV_CHECK_SUBPROCESS"

# -- exercise 1: the chained hash -----------------------------------------------------------


@exercise(1, "chained_hashes")
def check_chained_hash(fn: Callable[..., list[bytes]]) -> None:
    """`fn(token_ids, block_size, salt=None)` returns one stable hash per full block, chained,
    over an encoding in which no two different inputs collide."""
    if os.environ.get(_IN_SUBPROCESS):
        return  # the learner's cell, re-run in a fresh process by this very check

    def h(tokens: list[int], size: int, salt: str | None = None) -> list[bytes]:
        salted = f", salt={salt!r}" if salt is not None else ""
        line = f"chained_hashes({tokens}, {size}{salted})"
        return call(line, fn, list(tokens), size, **({} if salt is None else {"salt": salt}))

    out = h(list(range(10)), 4)
    expect(
        isinstance(out, list) and len(out) == 2,
        f"chained_hashes(list(range(10)), 4) should return 2 hashes (10 tokens make 2 full "
        f"blocks of 4; a partial block has no hash), got {_shown(out)}.",
    )
    expect(
        all(isinstance(x, bytes) and len(x) >= 16 for x in out),
        "each hash should be bytes, at least 16 of them (a SHA-256 digest is 32), got "
        f"{_shown(out)}: use hashlib, never hash().",
    )
    expect(h([], 4) == [] and h([1, 2, 3], 4) == [], "fewer tokens than a block: no hash ([]).")
    expect(h(list(range(10)), 4) == out, "hashing the same tokens twice must give the same hashes.")
    same = h([1, 2, 3, 4, 1, 2, 3, 4], 4)
    expect(
        same[0] != same[1],
        "chained_hashes([1, 2, 3, 4, 1, 2, 3, 4], 4): the two blocks hold the same tokens, but "
        "the second hash must differ, because it names everything before it too (chain the "
        "parent's hash in).",
    )
    expect(
        h([9, 2, 3, 4, 5, 6, 7, 8], 4)[1] != h([1, 2, 3, 4, 5, 6, 7, 8], 4)[1],
        "[9, 2, 3, 4, 5, 6, 7, 8] and [1, 2, 3, 4, 5, 6, 7, 8] share their second block but not "
        "their first: their second hashes must differ, or a hit on block 2 alone would splice "
        "in K/V computed after other tokens.",
    )
    expect(
        h([1, 2, 3, 4, 5, 6, 7, 8], 4)[:1] == h([1, 2, 3, 4, 0, 0, 0, 0], 4)[:1],
        "prompts that share their first block must share its hash.",
    )
    for a, b, why in _COLLISIONS:
        expect(
            h(a, 2) != h(b, 2),
            f"chained_hashes({a}, 2) == chained_hashes({b}, 2): different blocks, same hash. "
            + why,
        )
    plain = h(list(range(8)), 4)
    salted = h(list(range(8)), 4, "tenant-a")
    expect(
        salted[0] != plain[0] and salted[1] != plain[1],
        "salt='tenant-a' must change every hash of the chain (mix it into the first block's).",
    )
    expect(salted == h(list(range(8)), 4, "tenant-a"), "the same salt must give the same hashes.")
    expect(salted != h(list(range(8)), 4, "tenant-b"), "two salts must give different hashes.")
    expect(
        h(list(range(8)), 4, "") != plain,
        "salt='' and no salt (None) give the same hashes: an empty salt is still a salt. Encode "
        "whether there is one, not only its bytes ((salt or '').encode() cannot tell them apart).",
    )
    _random_collisions(h)
    _same_in_other_processes(fn)
    passed("chained, salted, collision-free on the probes, the same in other processes")


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
            )


def _same_in_other_processes(fn: Callable[..., list[bytes]]) -> None:
    """Re-run the learner's function in fresh processes with other PYTHONHASHSEEDs."""
    cases = [[list(range(8)), 4, "tenant-a"], [[5, 6, 7, 8], 2, None]]
    here = [[x.hex() for x in fn(list(t), size, salt=salt)] for t, size, salt in cases]
    source = _cell_source(fn)
    for seed in ("1", "2"):
        theirs = _run_elsewhere(source, fn.__name__, cases, seed)
        if theirs != here:
            raise CheckFailed(
                f"chained_hashes(list(range(8)), 4, salt='tenant-a') gives other hashes in a "
                f"fresh Python process with PYTHONHASHSEED={seed}: a server restarted, or a "
                "second server, would never hit the cache, and two processes could disagree on "
                "what a hash means. Python's hash() of a str (or bytes) changes with "
                "PYTHONHASHSEED; hash only bytes you build yourself, with hashlib."
            )


def _cell_source(fn: Callable[..., Any]) -> str:
    filename = fn.__code__.co_filename
    lines = linecache.getlines(filename)
    if not lines:
        raise CheckFailed(
            f"cannot read the source of {fn.__name__} to run it in another process; define it "
            "in a notebook cell or a .py file."
        )
    if fn.__qualname__ != fn.__name__:
        raise CheckFailed(
            f"define {fn.__name__} at the top level of its cell (not inside another function "
            "or class), so the check can run it in another process."
        )
    return "".join(line for line in lines if not line.lstrip().startswith(("%", "!")))


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
        raise CheckFailed(
            f"running your cell again in a fresh Python process (to compare the hashes across "
            f"processes) failed: {last}. Keep {name} and everything it needs (imports, helpers) "
            "in one cell."
        )
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- exercise 2: the longest cached prefix ----------------------------------------------------


@exercise(2, "cached_prefix")
def check_cached_prefix(fn: Callable[..., list[int]], *, seed: int = 0) -> None:
    """`fn(index, hashes, num_prompt_tokens, block_size)`: the blocks of the longest run of
    `hashes` *from the start* that `index` (hash -> block id, read-only) holds, never
    covering the prompt's last token."""

    def run(ops: list[Any], r: Replay) -> None:
        size, cached, holes, prompt = ops
        index: dict[bytes, int] = {}
        r.note("from paged_kv.cache.hashing import block_hashes")
        r.note("index = {}")
        block = 0
        for tokens in cached:
            ids = list(range(block, block + len(tokens) // size))
            block += len(ids)
            for b, digest in zip(ids, block_hashes(tokens, size), strict=True):
                index.setdefault(digest, b)
            r.note(f"index.update(zip(block_hashes({tokens}, {size}), {ids}))")
        if holes:  # evicted blocks leave holes in the chains
            gone = sorted(set(holes))
            for digest in [d for d, b in index.items() if b in gone]:
                del index[digest]
            r.note(f"for h in [h for h, b in index.items() if b in {gone}]: del index[h]")
        hashes = block_hashes(prompt, size)
        want = _reference_prefix(index, hashes, len(prompt), size)
        r.note(f"hashes = block_hashes({prompt}, {size})")
        got = r.run(
            f"cached_prefix(index, hashes, {len(prompt)}, {size})",
            fn,
            MappingProxyType(dict(index)),
            list(hashes),
            len(prompt),
            size,
        )
        got = list(got) if isinstance(got, list | tuple) else got
        if got != want:
            r.fail(
                _prefix_cause(got, want, index, hashes, len(prompt), size),
                f"the hits should be blocks {want}, got {got!r}"
                + _prefix_cause(got, want, index, hashes, len(prompt), size, long=True),
            )

    def make(rng: random.Random) -> list[Any]:
        size = rng.randint(1, 4)
        common = [rng.randrange(3) for _ in range(rng.randint(0, 4 * size))]
        cached = [
            common + [rng.randrange(3) for _ in range(rng.randint(0, 3 * size))]
            for _ in range(rng.randint(1, 3))
        ]
        total = sum(len(t) // size for t in cached)
        holes = [rng.randrange(max(total, 1)) for _ in range(rng.choice([0, 0, 1, 2]))]
        prompt = common + [rng.randrange(3) for _ in range(rng.randint(1, 3 * size))]
        if rng.random() < 0.3:
            prompt = rng.choice(cached)[: rng.randint(1, 5 * size)] or [0]
        return [size, cached, holes, prompt]

    search(run, make, trials=400, seed=seed, what="check_cached_prefix", keep=4)
    passed("the leading run of hits, never the last token, on 400 random trials")


def _reference_prefix(index: dict, hashes: list, n: int, size: int) -> list[int]:
    blocks = []
    for digest in hashes[: (n - 1) // size]:
        if digest not in index:
            break
        blocks.append(index[digest])
    return blocks


def _prefix_cause(
    got: Any, want: list[int], index: dict, hashes: list, n: int, size: int, long: bool = False
) -> str:
    cap = (n - 1) // size
    every = [index[d] for d in hashes if d in index]
    if isinstance(got, list) and got and all(isinstance(b, bytes) for b in got):
        why = "return the block ids the index maps the hashes to, not the hashes"
    elif isinstance(got, list) and len(got) > cap and len(got) * size >= n:
        why = (
            f"the last prompt token is never a hit (its logits must be computed): at most "
            f"(num_prompt_tokens - 1) // block_size = {cap} blocks"
        )
    elif isinstance(got, list) and got == every[: len(got)] and got != want[: len(got)]:
        why = "a hit is a run of hashes from the start; stop at the first hash the index lacks"
    else:
        why = "the hits are the longest run of hashes from the start that the index holds"
    return f" ({why})" if long else why


# -- exercise 3: the all-or-nothing add ------------------------------------------------------


class RecordingLRU(LRU):
    """LRU that logs every call the pool makes, so a check can see that nothing happened."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def touch(self, block_id: int) -> None:
        self.calls.append(f"touch({block_id})")
        super().touch(block_id)

    def make_evictable(self, block_id: int) -> None:
        self.calls.append(f"make_evictable({block_id})")
        super().make_evictable(block_id)

    def revive(self, block_id: int) -> None:
        self.calls.append(f"revive({block_id})")
        super().revive(block_id)

    def evict(self) -> int:
        block_id = super().evict()
        self.calls.append(f"evict()->{block_id}")
        return block_id


@exercise(3, "allocate_table")
def check_allocate_table(fn: Callable[..., list[int]], *, seed: int = 0) -> None:
    """`fn(pool, hits, num_blocks)` returns the new sequence's table, the hit blocks (shared)
    followed by fresh ones, or raises `OutOfBlocks` having changed nothing, not even the
    eviction policy's order or counts: the fit check comes before any reference is taken."""

    def run(ops: list[Any], r: Replay) -> None:
        num_blocks, allocated, kept, released, hits_at, extra = ops
        policy = RecordingLRU()
        evicted: list[int] = []
        pool = BlockPool(num_blocks, 4, eviction=policy, on_evict=evicted.append)
        twin = BlockPool(num_blocks, 4, eviction=LRU())
        r.note(f"pool = BlockPool({num_blocks}, 4)")
        for p in (pool, twin):
            ids = p.allocate(allocated)
            p.keep_content([b for b in ids if b in kept])
            p.release([b for b in ids if b in released])
        r.note(f"pool.allocate({allocated})  # blocks 0..{allocated - 1}")
        r.note(f"pool.keep_content({sorted(b for b in range(allocated) if b in kept)})")
        r.note(f"pool.release({sorted(b for b in range(allocated) if b in released)})")
        usable = [b for b in range(allocated) if b not in released or b in kept]
        hits = [usable[i % len(usable)] for i in hits_at] if usable else []
        hits = list(dict.fromkeys(hits))  # distinct, in order
        want_n = len(hits) + extra
        before = _pool_state(pool)
        policy.calls.clear()
        evicted.clear()
        revived = sum(1 for b in hits if twin.ref_count(b) == 0)
        available = twin.num_available - revived
        line = f"allocate_table(pool, {hits}, {want_n})"
        if extra > available:
            err = r.raises(OutOfBlocks, line, fn, pool, list(hits), want_n)
            if _pool_state(pool) != before or policy.calls or evicted:
                r.fail(
                    "not all or nothing",
                    "a refused add must change nothing, not even the eviction policy's order "
                    f"or counts; the pool's calls to its policy were {policy.calls or 'none'}"
                    + (f", blocks {evicted} were evicted" if evicted else "")
                    + ". Check that the fresh blocks fit before taking any reference (sharing "
                    "then undoing moves the hits in the policy's order)",
                )
            if (err.requested, err.available) != (extra, available):
                why = (
                    f"the {revived} cached hit(s) stop being evictable once shared, so only "
                    f"{available} of the {twin.num_available} free-or-cached blocks can be had"
                    if revived
                    else f"{available} blocks are free or evictable"
                )
                r.fail(
                    "OutOfBlocks fields",
                    f"OutOfBlocks should say requested={extra}, "
                    f"available={available} ({why}); got requested={err.requested}, "
                    f"available={err.available}",
                )
            return
        if extra == available and revived and extra:
            r.note(
                f"# {extra} fresh blocks fit exactly: {revived} of the hits are cached, so "
                "they stop being evictable once shared"
            )
        table = r.run(line, fn, pool, list(hits), want_n)
        gone = [b for b in evicted if b in hits]
        if gone:
            r.fail(
                "evicted a hit",
                f"blocks {gone} were hits, but your allocation evicted "
                "them (their content is gone, and the table would read another prompt's "
                "K/V): share the hits first, so that they are in use and cannot be evicted",
            )
        table = list(table) if isinstance(table, list | tuple) else table
        if not isinstance(table, list) or table[: len(hits)] != hits or len(table) != want_n:
            r.fail(
                "table",
                f"the table should be the {len(hits)} hits {hits} followed by "
                f"{extra} fresh blocks ({want_n} in all); got {table!r}",
            )
        twin.share(hits)
        twin.allocate(extra)
        fresh = table[len(hits) :]
        refs = [pool.ref_count(b) for b in table]
        want_refs = [twin.ref_count(b) for b in hits] + [1] * extra
        if refs != want_refs or len(set(fresh) | set(hits)) != want_n:
            r.fail(
                "references",
                f"after the add, the table's blocks should have reference "
                f"counts {want_refs} (one more on each hit, 1 on each fresh block), but "
                f"they have {refs}",
            )
        counts = (pool.num_free, pool.num_cached, pool.num_in_use)
        want_counts = (twin.num_free, twin.num_cached, twin.num_in_use)
        if counts != want_counts:
            r.fail(
                "pool counts",
                f"(free, cached, in use) blocks should be {want_counts}, they are {counts}",
            )

    def make(rng: random.Random) -> list[Any]:
        num_blocks = rng.randint(3, 10)
        allocated = rng.randint(1, num_blocks)
        kept = {b for b in range(allocated) if rng.random() < 0.6}
        released = {b for b in range(allocated) if rng.random() < 0.6}
        hits_at = [rng.randrange(10) for _ in range(rng.randint(0, 3))]
        extra = rng.randint(0, num_blocks)
        return [num_blocks, allocated, kept, released, hits_at, extra]

    fixed("Every step of the check", _allocate_table_scenario(fn), Replay())
    search(run, make, trials=400, seed=seed, what="check_allocate_table", keep=6)
    passed("fit checked before any reference, on 400 random trials")


def _allocate_table_scenario(fn: Callable[..., Any]) -> Callable[[Replay], None]:
    """A 4-block pool: one cached hit, one other cached block, two free. 4 fresh blocks do not
    fit (the hit stops being evictable once shared), 3 fit exactly."""

    def scenario(r: Replay) -> None:
        policy = RecordingLRU()
        pool = BlockPool(4, 4, eviction=policy)
        r.note("pool = BlockPool(4, 4)")
        r.run("pool.allocate(2)", pool.allocate, 2)
        r.run("pool.keep_content([0, 1])", pool.keep_content, [0, 1])
        r.run("pool.release([0, 1])", pool.release, [0, 1])
        r.note("# blocks 0 and 1 are cached, 2 and 3 free; block 0 is a hit")
        policy.calls.clear()
        err = r.raises(OutOfBlocks, "allocate_table(pool, [0], 5)", fn, pool, [0], 5)
        if policy.calls or pool.ref_count(0) != 0 or pool.num_free != 2:
            r.fail(
                "not all or nothing",
                "a refused add must change nothing, not even the eviction policy's order or "
                f"counts, but the pool made these calls to its policy: {policy.calls}; check "
                "that the fresh blocks fit before taking any reference (sharing, then undoing, "
                "moves the hits in the policy's order)",
            )
        if (err.requested, err.available) != (4, 3):
            r.fail(
                "OutOfBlocks fields",
                "4 fresh blocks are needed; block 1 (cached) and "
                "blocks 2-3 (free) could be had, but not block 0, the hit: it stops being "
                "evictable once shared. So OutOfBlocks(requested=4, available=3); got "
                f"requested={err.requested}, available={err.available}",
            )
        table = r.run("allocate_table(pool, [0], 4)", fn, pool, [0], 4)
        if not isinstance(table, list | tuple) or list(table)[:1] != [0] or len(table) != 4:
            r.fail(
                "table",
                f"3 fresh blocks fit exactly (2 free, 1 evictable); the table "
                f"should be [0] followed by 3 fresh blocks, got {table!r}",
            )

    return scenario


def _pool_state(pool: BlockPool) -> tuple:
    return tuple((pool.ref_count(b), pool.state(b)) for b in range(pool.num_blocks)), (
        pool.num_free,
        pool.num_cached,
        list(pool.policy._order),  # type: ignore[union-attr]
    )


# -- your parts so far -----------------------------------------------------------------------


@exercise(None, "your parts so far")
def check_prefix_parts(
    block_hasher: Callable[..., Any],
    prefix_lookup: Callable[..., Any],
    allocate_table: Callable[..., Any],
    *,
    pool: Any = None,
    eviction: Any = "lru",
    seed: int = 0,
) -> None:
    """Your three parts (and your pool and policy class, when given) inside a `KVCacheManager`,
    on multi-tenant traffic with shared system prompts, hit exactly what the library's parts
    hit (under the same eviction policy)."""
    from paged_kv.cache.manager import KVCacheManager

    hooks = {
        "block_hasher": block_hasher,
        "prefix_lookup": prefix_lookup,
        "allocate_table": allocate_table,
    }
    if pool is not None:
        hooks["pool"] = pool
    rng = random.Random(seed)
    systems = [[rng.randrange(300) for _ in range(rng.randint(8, 20))] for _ in range(3)]
    ours = KVCacheManager(40, 4, eviction=eviction)  # the same policy: the same victims
    theirs = call(
        "KVCacheManager(40, 4, ...) with your parts",
        KVCacheManager,
        40,
        4,
        eviction=eviction,
        **hooks,
    )
    live: list[int] = []
    hit_tokens = 0
    for i in range(150):
        prompt = rng.choice(systems) + [rng.randrange(300) for _ in range(rng.randint(1, 12))]
        salt = rng.choice([None, "alice", "bob"])
        if live and (rng.random() < 0.45 or not ours.can_allocate(len(prompt))):
            seq = live.pop(rng.randrange(len(live)))
            ours.free_sequence(seq)
            call(f"manager.free_sequence({seq})", theirs.free_sequence, seq)
            continue
        try:
            ours.add_sequence(i, prompt, salt=salt)
        except OutOfBlocks:
            expect_raises(
                OutOfBlocks,
                lambda i=i, p=prompt, s=salt: theirs.add_sequence(i, p, salt=s),
                f"request {i}: adding a {len(prompt)}-token prompt that does not fit",
            )
            continue
        call(
            f"manager.add_sequence({i}, <{len(prompt)} tokens>, salt={salt!r})",
            theirs.add_sequence,
            i,
            prompt,
            salt=salt,
        )
        live.append(i)
        expect(
            theirs.num_cached_tokens(i) == ours.num_cached_tokens(i),
            f"request {i} (salt {salt!r}): with your parts {theirs.num_cached_tokens(i)} prompt "
            f"tokens were prefix hits; the library finds {ours.num_cached_tokens(i)}.",
        )
        hit_tokens += ours.num_cached_tokens(i)
    passed(f"your prefix caching: {hit_tokens:,} prompt tokens hit, as the library's")


# -- the library's pieces, as the earlier exercises had them (used by its tests) ---------------


def check_share_cached_prefix(fn: Callable[..., list[int]]) -> None:
    """`fn(pool, cache, hashes, num_prompt_tokens)` shares the longest cached run of `hashes`.

    It never covers the last prompt token and takes one reference on each block it returns.
    """

    rng = random.Random(0)
    for trial in range(300):
        size = rng.randint(1, 4)
        pool, cache = BlockPool(32, size), PrefixCache()
        cached_tokens = [rng.randrange(3) for _ in range(rng.randint(0, 5 * size))]
        cached = block_hashes(cached_tokens, size)
        blocks = pool.allocate(len(cached))
        for block, digest in zip(blocks, cached, strict=True):
            cache.register(block, digest)
        pool.keep_content(blocks)
        if rng.random() < 0.5:
            pool.release(blocks)  # cached, not in use: a hit revives them
        prompt = [rng.randrange(3) for _ in range(rng.randint(1, 6 * size))]
        hashes = block_hashes(prompt, size)
        refs = [pool.ref_count(b) for b in blocks]
        want = cache.longest_prefix(hashes[: (len(prompt) - 1) // size])
        got = list(fn(pool, cache, hashes, len(prompt)))
        expect(
            got == want,
            f"trial {trial}: block_size {size}, cached prompt {cached_tokens}, new prompt "
            f"{prompt}: the hits should be blocks {want}, got {got}"
            + (" (the last prompt token is never a hit)" if len(got) > len(want) else "")
            + ".",
        )
        after = [pool.ref_count(b) for b in blocks]
        expected = [r + (b in want) for b, r in zip(blocks, refs, strict=True)]
        expect(
            after == expected,
            f"trial {trial}: every hit block needs exactly one more reference (pool.share); "
            f"ref counts went from {refs} to {after}, expected {expected}.",
        )
    passed("share cached prefix")


def check_copy_on_write(fn: Callable[..., tuple[int, int] | None]) -> None:
    """`fn(pool, block_table, num_tokens)` copies a shared, partly filled last block first."""
    pool = BlockPool(8, 4)
    table = pool.allocate(2)  # 6 tokens: the second block is half full
    pool.share(table)  # a fork shares both
    copy = fn(pool, table, 6)
    expect(
        copy is not None and copy[0] != copy[1] and table[1] == copy[1],
        f"the last block is shared and half full: the table must get a private copy and the "
        f"call return (old, new); got {copy} and table {table}.",
    )
    assert copy is not None
    expect(
        pool.ref_count(copy[0]) == 1 and pool.ref_count(copy[1]) == 1,
        "the shared block should lose this table's reference, and the copy have exactly one.",
    )
    expect(fn(pool, table, 6) is None, "the last block is private now: no copy is needed.")
    full = pool.allocate(1)
    pool.share(full)
    expect(
        fn(pool, full, 4) is None,
        "a full last block is never written again: no copy, even when shared.",
    )
    tight = BlockPool(2, 4)
    shared = tight.allocate(2)
    tight.share(shared[1:])
    before = list(shared)
    expect_raises(OutOfBlocks, lambda: fn(tight, shared, 5), "copying with no free block")
    expect(
        shared == before and tight.ref_count(before[1]) == 2, "a failed copy must change nothing."
    )
    passed("copy-on-write")
