"""Chapter 04 checks: the chained hash, the longest cached prefix, the all-or-nothing add and
the three in a manager, each beside the library's own on the same calls (`harness`)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from types import SimpleNamespace
from typing import Any

from paged_kv.cache.block_pool import BlockPool
from paged_kv.cache.hashing import block_hashes
from paged_kv.cache.manager import KVCacheManager
from paged_kv.cache.prefix_cache import PrefixCache
from paged_kv.course.checks import causes
from paged_kv.course.checks.cost import constant_work, grows_in_time
from paged_kv.course.checks.failures import CheckFailed, call, exercise, passed, short_repr
from paged_kv.course.checks.harness import Mismatch, Trial, fail_with, fixed, search
from paged_kv.course.learner_manager import learner_manager
from paged_kv.errors import InvalidArgument, OutOfBlocks

_SUBPROCESS = "PAGED_KV_CHECK_SUBPROCESS"  # set where this check reruns the learner's cell
_PROBES = [  # (token_ids, block_size, salt, PYTHONHASHSEED of a fresh process, or None: here)
    *((tokens, 4, None, None) for tokens in ([*range(10)], [], [1, 2, 3], [1, 2, 3, 4] * 2)),
    *(([first, 2, 3, 4, 5, 6, 7, 8], 4, None, None) for first in (9, 1)),
    ([1, 2, 3, 4, 0, 0, 0, 0], 4, None, None),
    *((two, 2, None, None) for two in ([1, 256], [1, 0], [300_000, 1], [37_856, 1], [1, 23])),
    ([12, 3], 2, None, None),
    *(([*range(8)], 4, salt, None) for salt in (None, "tenant-a", "tenant-b", "", "None")),
    ([*range(8)], 4, "tenant-a", "1"),
    ([5, 6, 7, 8], 2, None, "2"),
]
_DIGEST = "each a whole digest, the 32 bytes of hashlib.sha256(...).digest() (not its "
_DIGEST += ".hexdigest(), nothing cut short, never Python's hash())"
_ONCE = "Twice the tokens may cost twice the work, not more: hash each block once, "
_ONCE += "sha256(parent + its encoding), the parent's digest standing for all before it."
_COLLISION = "a hash names the block's tokens, all before them (chain the parent's hash in) and "
_COLLISION += "the salt, in bytes no other input gives: each id whole, in a fixed width (ids pass "
_COLLISION += "100,000: struct.pack('<q', id)), a tag for no salt ('' and 'None' are salts)"


@exercise(1, "chained_hashes")
def check_chained_hash(fn: Callable[..., list[bytes]]) -> None:
    """`fn(token_ids, block_size, salt=None)`: hashes that two prefixes (and salts) share
    exactly when `block_hashes`'s do, one per full block, the same in any process."""
    if os.environ.get(_SUBPROCESS):
        return  # the learner's cell, rerun in a fresh process by this very check
    call("chained_hashes([], 4)", fn, [], 4)  # the salt may be left out (else bad_signature)
    fixed(lambda trial: _play_hashes(fn, _PROBES, trial))
    constant_work(
        lambda n: (SimpleNamespace(token_ids=list(range(n))), n),
        lambda prompt, n: fn(prompt.token_ids, 4),
        (256, 512),
        what="chained_hashes(list(range(n)), 4)",
        unit="tokens",
        hint=_ONCE,
    )
    grows_in_time(  # a buffer of every token so far, hashed at each block: quadratic, in C
        lambda n: list(range(n)),
        lambda tokens: fn(tokens, 4),
        (1_024, 16_384),
        what="chained_hashes(list(range(n)), 4)",
        unit="tokens",
        hint=_ONCE,
        factor=64,  # 16 times the tokens: 16 times the time, linear; about 256, quadratic
    )
    passed("chained, salted, collision-free, one hash per block, the same in other processes")


def _play_hashes(fn: Callable[..., Any], ops: list[Any], trial: Trial) -> None:
    mine_of, seen = {}, {}  # the library's digest -> the learner's; the learner's -> its input
    for tokens, size, salt, seed in ops:
        salted = {} if salt is None else {"salt": salt}
        line = f"chained_hashes({tokens}, {size}{''.join(f', salt={salt!r}' for _ in salted)})"
        if seed is None:
            got = _listed(trial.run(line, fn, trial.hand(tokens), size, **salted))
        else:
            line += f"  # in a fresh Python, PYTHONHASHSEED={seed}"
            trial.note(line)
            got = _elsewhere(fn, tokens, size, salt, seed)
        want, full = f"{len(tokens) // size} hashes, one per full block", len(tokens) // size
        whole = isinstance(got, list) and all(isinstance(h, bytes) and len(h) >= 16 for h in got)
        if not whole or len(got) != full:
            trial.fail(causes.WRONG_RESULT, _DIGEST, line=line, want=want, got=short_repr(got))
        for i, theirs in enumerate(block_hashes(tokens, size, **salted)):
            digest = got[i]
            what, prefix = f"hash {i} of `{line}`", tokens[: (i + 1) * size]
            if mine_of.setdefault(theirs, (digest, what))[0] != digest:
                message = f"{what} differs from {mine_of[theirs][1]}, the same prefix and salt: "
                message += "Python's hash() changes with PYTHONHASHSEED, hashlib's digests do not"
                fail_with(causes.WRONG_RESULT, "unstable", message)
            other, other_prefix, other_salt = seen.setdefault(digest, (what, prefix, salt))
            if (other_prefix, other_salt) != (prefix, salt):
                message = f"{what} equals {other}: tokens {prefix} against {other_prefix}, salt "
                message += f"{salt!r} against {other_salt!r}; {_COLLISION}"
                fail_with(causes.WRONG_RESULT, "collision", message)


_RUNNER = """import json, sys
source, name, tokens, size, salt = json.load(sys.stdin)
exec(compile(source, "<your cell>", "exec"), namespace := {"__name__": "__learner__"})
print("\\n" + " ".join(h.hex() for h in namespace[name](tokens, size, salt=salt)))"""


def _elsewhere(fn: Callable[..., Any], tokens: list[int], size: int, salt: Any, seed: str) -> Any:
    """`fn`'s hashes in a fresh Python: its cell rerun alone, as `parts.save` keeps it."""
    from paged_kv.course.parts import _source_of  # parts imports the checks

    try:
        source = _source_of(fn)
    except (InvalidArgument, SyntaxError):
        source = ""  # then the rerun fails, and says where to define it
    job = json.dumps([source, fn.__name__, tokens, size, salt])
    env = {**os.environ, "PYTHONHASHSEED": seed, _SUBPROCESS: "1"}
    run = [sys.executable, "-c", _RUNNER]
    done = subprocess.run(run, input=job, capture_output=True, text=True, env=env, check=False)
    if done.returncode:
        said = (done.stderr.strip().splitlines() or [""])[-1]
        message = f"rerunning {fn.__name__}'s cell alone in a fresh Python failed: {said}. Define "
        message += "it at the top level of its cell with all it needs; try it out in a cell below."
        raise CheckFailed(message, causes.WRONG_RESULT)
    return [bytes.fromhex(h) for h in done.stdout.splitlines()[-1].split()]


_REGISTER = "for b, h in enumerate(block_hashes({}, {}), {}): cache.register(b, h)"
_HINT = "the hits are the block ids of the longest run of hashes from the start that the index "
_HINT += "holds: stop at the first miss (`h not in index`; 0 is a block id too), and never cover "
_HINT += "the last prompt token: at most (num_prompt_tokens - 1) // block_size = {} blocks"


@exercise(2, "cached_prefix")
def check_cached_prefix(fn: Callable[..., list[int]], *, seed: int = 0) -> None:
    """`fn(index, hashes, num_prompt_tokens, block_size)`: the blocks of the longest run of
    `hashes` from the start in `index` (read-only), never the last token, as `PrefixCache`."""

    def look_up(trial: Trial, cache: PrefixCache, hashes: list, n: int, size: int):
        index, cap = dict(cache.block_of_hash()), (n - 1) // size
        line = f"cached_prefix(index, hashes, {n}, {size})"
        trial.note("index = dict(cache.block_of_hash())")
        trial.same(
            line,
            lambda: fn(index, trial.hand(hashes), n, size),
            lambda: cache.longest_prefix(hashes[:cap]),
            compare=lambda got, want: None if _listed(got) == want else _HINT.format(cap),
        )
        if index != cache.block_of_hash():
            message = f"`{line}` changed the index: it is the cache's own, shared by every "
            message += "sequence (read-only in the manager); look hashes up, never change it"
            fail_with(causes.MUTATES_ARGUMENT, "the index", message)

    search(_prefix_play(look_up), _draw_prefix, trials=400, seed=seed, what="check_cached_prefix")
    constant_work(
        _missing_first,
        lambda held, hashes: fn(held.index, hashes, 4 * len(hashes), 4),
        (64, 4096),
        what="cached_prefix(index, hashes, 4 * len(hashes), 4) (a miss, then hits)",
        unit="hashes and index entries",
        hint="Look each hash up (`h in index`), none after a miss; never iterate over the index.",
    )
    passed("the leading run of hits up to the first miss, never the last token")


def _missing_first(size: int) -> tuple[SimpleNamespace, list[bytes]]:
    index = {i.to_bytes(32, "big"): i for i in range(size)}
    return SimpleNamespace(index=index), [b"a miss", *index]


def _prefix_play(look_up: Callable[..., None]) -> Callable[[list, Trial], None]:
    """Blocks cached, holes, then `look_up`."""

    def play(ops: list[Any], trial: Trial) -> None:
        (size, prompt), cache, block = ops[0], PrefixCache(), 0
        trial.note("cache = PrefixCache()")
        for kind, arg in ops[1:]:
            if kind == "cache":
                hashes = block_hashes(arg, size)
                trial.note(_REGISTER.format(arg, size, block))
                for b, digest in enumerate(hashes, block):
                    cache.register(b, digest)
                block += len(hashes)
            elif arg < block:  # an evicted block: a hole in the chains
                trial.note(f"cache.forget({arg})")
                cache.forget(arg)
        trial.note(f"hashes = block_hashes({prompt}, {size})")
        look_up(trial, cache, block_hashes(prompt, size), len(prompt), size)

    return play


def _draw_prefix(rng: random.Random) -> list[Any]:
    size, few = rng.randint(1, 4), lambda n: [rng.randrange(3) for _ in range(rng.randint(0, n))]
    common = few(4 * size)
    cached = [common + few(3 * size)]
    cached += [rng.choice(cached)[: rng.randint(0, 4 * size)] + [rng.randrange(3)] * size]
    prompt = rng.choice(cached)[: rng.randint(1, 5 * size)] if rng.random() < 0.3 else []
    prompt = prompt or [*common, *few(3 * size), rng.randrange(3)]
    holes = [("evict", rng.randrange(8)) for _ in range(rng.choice([0, 0, 1, 2]))]
    return [(size, prompt), *(("cache", tokens) for tokens in cached), *holes]


def _listed(got: Any) -> Any:
    return list(got) if isinstance(got, tuple) else got


_SCENARIOS: list[list[Any]] = [  # 4 blocks: 0 and 1 cached, 2 and 3 free; block 0 is the hit
    [4, ("add", (), 2), ("free", (), 0), ("add", (0,), 4), ("add", (0,), 3)],
    [4, ("add", (), 1), ("free", (), 0), ("fail", (0,), 2)],  # the pool's allocate fails
]
_STATE = "tuple(map(pool.ref_count, range(pool.num_blocks))), tuple(pool.policy._order)"
_STATE_HINT = "one more reference on each hit, one on each fresh block, taken once the fit is "
_STATE_HINT += "checked (a refusal changes nothing, not even the eviction order), hits first"
_FAILED = "pool.allocate failed: let its error through (catching it returns a short table, "
_FAILED += "and leaks the references taken)"


def _state(pool: BlockPool) -> tuple:
    return eval(_STATE, {"pool": pool})  # (the policy: the LRU a BlockPool makes)


def _table_of(pool: BlockPool, hits: list[int], num_blocks: int) -> list[int]:
    """The library's add: the fit (a cached hit is in use once shared), hits, fresh blocks."""
    fresh, available = num_blocks - len(hits), pool.num_available - pool.count_unreferenced(hits)
    if fresh > available:
        raise OutOfBlocks("", requested=fresh, available=available)
    pool.share(hits)
    return hits + pool.allocate(fresh)


def _refuse_allocation(n: int = 1) -> list[int]:
    raise OutOfBlocks("the check made pool.allocate fail", requested=n, available=0)


@exercise(3, "allocate_table")
def check_allocate_table(fn: Callable[..., list[int]], *, seed: int = 0) -> None:
    """`fn(pool, hits, num_blocks)`: the hits (shared) then fresh blocks, or `OutOfBlocks` and
    nothing changed, not even the eviction order; the pool's errors let through; no scan."""

    def play(ops: list[Any], trial: Trial) -> None:
        (n, *adds), tables = ops, []
        pools = mine, ref = BlockPool(n, 4), BlockPool(n, 4)
        trial.note(f"pool = BlockPool({n}, 4)")
        for kind, picks, extra in adds:
            if kind == "free" and tables:  # (a free with nothing to free adds instead)
                table = tables.pop(extra % len(tables))
                trial.run(f"pool.release({table})", mine.release, table)
                ref.release(table)
                continue
            kept = [b for b in range(n) if ref.ref_count(b) or b in ref.policy]
            hits = list(dict.fromkeys(kept[i % len(kept)] for i in picks)) if kept else []
            line, got, want = _add(trial, fn, pools, hits, len(hits) + extra, kind)
            trial.expect(_STATE, _state(mine), _state(ref), _STATE_HINT)
            if want is None:  # refused
                continue
            if _listed(got) != want:
                hint = "the hits first, as they are, then the fresh blocks, in a new list"
                trial.fail(causes.WRONG_RESULT, hint, line=line, want=want, got=short_repr(got))
            trial.run(f"pool.keep_content({want})", mine.keep_content, want)
            ref.keep_content(want)
            tables.append(want)

    for scenario in _SCENARIOS:
        fixed(partial(play, scenario))
    search(play, _draw_adds, trials=300, seed=seed, what="check_allocate_table")
    constant_work(
        _cached_pool,
        lambda pool, size: fn(pool, [0, 1], 4),
        (64, 4096),
        what="allocate_table(pool, [0, 1], 4)",
        unit="blocks in the pool",
        hint="Count the cached hits among the hits (pool.ref_count(b) == 0), not in the pool.",
    )
    passed("the fit checked before any reference, the pool's errors let through, no scan")


def _add(trial: Trial, fn: Callable, pools: tuple, hits: list[int], num_blocks: int, kind: str):
    """One add by the learner's `fn` and by the library: the line, what each returned."""
    (mine, ref), line = pools, f"allocate_table(pool, {hits}, {num_blocks})"
    cached, given = ref.count_unreferenced(hits), trial.hand(hits)
    if kind == "fail":
        trial.note("# the check makes pool.allocate raise OutOfBlocks, as a failing pool would")
        mine.allocate = ref.allocate = _refuse_allocation
    try:
        want = _table_of(ref, list(hits), num_blocks)
    except OutOfBlocks as refusal:
        why = _FAILED if kind == "fail" else f"pool.num_available less {cached} cached hit(s)"
        trial.refuses(line, lambda: fn(mine, given, num_blocks), refusal, why=why)
        return line, None, None
    return line, trial.run(line, fn, mine, given, num_blocks), want


def _draw_adds(rng: random.Random) -> list[Any]:
    n, kinds = rng.randint(3, 10), ["add", "add", "free"]
    picks = [tuple(rng.randrange(10) for _ in range(rng.randint(0, 3))) for _ in range(8)]
    return [n, *((rng.choice(kinds), p, rng.randint(0, n)) for p in picks[: rng.randint(1, 8)])]


def _cached_pool(size: int) -> tuple[BlockPool, int]:
    pool = BlockPool(size, 4)
    pool.keep_content(pool.allocate(4))
    pool.release([0, 1, 2, 3])  # cached: hits
    return pool, size


_HOOKS = ("block_hasher", "prefix_lookup", "allocate_table")


def _lent(lent: dict[str, bool], eviction: Any) -> str:
    """Which of the library's parts stand in (`lent`), and why none of yours is loaded."""
    from paged_kv.course import parts as saved  # parts imports the checks

    names = {"pool": "BlockPool", "eviction": f"{eviction!r} policy"}
    text = " and ".join(names[name] for name, library in lent.items() if library)
    found = [(name, saved.origin(name)) for name, library in lent.items() if library]
    why = [f"{saved.PARTS[name].what}: {said}" for name, (mine, said) in found if mine is None]
    return f"{text}: {'; '.join([*why, saved.searched()])}" if why else text


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
    """Your three parts (and pool and policy class, when given) in a `KVCacheManager` hit what
    the library's parts hit, on multi-tenant traffic with shared system prompts."""
    lent = {"pool": pool is None, "eviction": isinstance(eviction, str)}
    if lent["pool"] or lent["eviction"]:
        print(f"(with the library's {_lent(lent, eviction)})")
    parts = dict(zip(_HOOKS, (block_hasher, prefix_lookup, allocate_table), strict=True))
    parts |= {"pool": pool} if pool is not None else {}  # each part passed its own check

    def play(ops: list[Any], trial: Trial) -> None:
        ours, live = KVCacheManager(40, 4, eviction=eviction), []
        line = f"manager = learner_manager(40, 4, eviction={eviction!r}, <your parts>)"
        theirs = trial.run(line, learner_manager, 40, 4, eviction=eviction, **parts)
        for i, prompt, salt, leave in ops:
            if live and (leave or not ours.can_allocate(len(prompt))):  # then every add fits
                seq = live.pop(i % len(live))
                ours.free_sequence(seq)
                trial.run(f"manager.free_sequence({seq})", theirs.free_sequence, seq)
                continue
            ours.add_sequence(i, prompt, salt=salt)
            line = f"manager.add_sequence({i}, {prompt}, salt={salt!r})"
            try:
                trial.run(line, theirs.add_sequence, i, prompt, salt=salt)
            except Mismatch as failure:  # the manager refused what one of the parts returned
                said = str(failure.__cause__).rstrip(".")
                if isinstance(failure.__cause__, InvalidArgument) and said.startswith(_HOOKS):
                    fail_with(causes.WRONG_RESULT, said.split()[0], f"`{line}`: your {said}")
                raise
            live.append(i)
            got = trial.read("manager.num_cached_tokens", lambda i=i: theirs.num_cached_tokens(i))
            trial.expect(f"manager.num_cached_tokens({i})", got, ours.num_cached_tokens(i))

    def draw(rng: random.Random) -> list[Any]:
        heads = [[rng.randrange(300) for _ in range(rng.randint(8, 20))] for _ in range(3)]
        ends = [[rng.randrange(300) for _ in range(rng.randint(1, 12))] for _ in range(150)]
        salts, leave = [None, "alice", "bob"], lambda: rng.random() < 0.45  # 3 system prompts
        return [(i, rng.choice(heads) + t, rng.choice(salts), leave()) for i, t in enumerate(ends)]

    search(play, draw, trials=1, seed=seed, what="check_prefix_parts", keep=0)
    passed("your prefix caching hits what the library's hits, on 150 requests of two tenants")
