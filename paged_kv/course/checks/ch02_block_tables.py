"""Chapter 02 checks: a manager (`manager_cls(pool)`, the interface of `KVCacheManager`
without prefix caching) keeps one block table per sequence, grows it only when the last block
is full, frees it tail first, all or nothing. It and the library's take the same random calls,
each on a `BlockPool` of the same size (both hand out blocks in the same order), and must agree
after every call."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from functools import partial
from types import FrameType
from typing import Any

from paged_kv.cache import block_table as library
from paged_kv.cache.block_pool import BlockPool
from paged_kv.cache.manager import KVCacheManager
from paged_kv.course import parts as saved
from paged_kv.course.checks import causes
from paged_kv.course.checks.failures import exercise, passed, stage
from paged_kv.course.checks.harness import (
    Trial,
    differential,
    fail_with,
    fixed,
    intents,
    name_of,
    search,
)
from paged_kv.study.operations import Add, Append, Free, decode_workload

# -- the learner's manager against the library's -----------------------------------------------


class _RecordingPool(BlockPool):
    """A `BlockPool` that remembers the blocks released, in order (for the tail-first rule)."""

    released: list[int]  # since the last call of the manager

    def release(self, block_ids: Any) -> list[int]:
        freed = super().release(ids := list(block_ids))
        self.released += ids
        return freed


_BLOCKS = "a prompt of n tokens takes ceil(n / block_size) blocks"
_SHORT = "the id is not live, or the pool is short: an unknown id is refused even with nothing "
_SHORT += "to append"
_SLOT = "token t lives at table[t // block_size] * block_size + t % block_size; only end=None "
_SLOT += "means the sequence's length (end=0 is an empty range)"
_CALLS = {  # an intent's kind: the method both managers get, why it may refuse, what to do
    "add": ("add_sequence", "a live id, an empty prompt, or too few free blocks", _BLOCKS),
    "append": ("append_tokens", _SHORT, "a new block only when the last is full"),
    "free": ("free_sequence", "the id is not live", ""),
    "slots": ("slot_mapping", "the id is not live, or not 0 <= start <= end <= its length", _SLOT),
}


def _start(manager_cls: Callable[[Any], Any], size: tuple[int, int], trial: Trial) -> tuple:
    """The learner's manager and the library's, each on a pool of `size`, and the ids tried
    (live, freed or refused; "zz" never added)."""
    pool = _RecordingPool(*size)
    pool.released = []
    trial.note(f"pool = BlockPool({size[0]}, {size[1]})")
    mine = trial.run(f"manager = {name_of(manager_cls, 'Manager')}(pool)", manager_cls, pool)
    return mine, KVCacheManager(*size, prefix_caching=False), pool, {"zz": None}


def _intent(
    ref: KVCacheManager, tried: dict[Any, None], new: str, kind: str, k: int, pick: float
) -> tuple[Any, tuple[Any, ...]]:
    """The id of a call and the arguments after it: a prompt (for a new id, a live one, or
    empty), tokens to append, or a range of the sequence (the usual ones and the edges)."""
    live: list[Any] = list(ref.sequence_ids)
    if kind == "add":
        duplicate = bool(pick <= 0.1 and live)
        empty = pick >= 0.95 or (duplicate and k == 0)  # a live id: still a duplicate
        return live[0] if duplicate else new, ([] if empty else list(range(max(k, duplicate))),)
    gone = [s for s in tried if s not in live]
    seq = live[int(pick * len(live))] if live and pick > 0.1 else gone[int(pick * 97) % len(gone)]
    if kind != "slots":
        return seq, (list(range(100, 100 + k % 7)),) if kind == "append" else ()
    n = ref.num_tokens(seq) if seq in live else 0
    start, end = sorted((k % (n + 2), int(pick * 997) % (n + 2)))
    spans = [(0, None), (start, None), (start, end), (0, 0), (-1, n), (end, start)]
    return seq, spans[(k + int(pick * 10)) % len(spans)]


def _step(trial: Trial, state: tuple, op: tuple) -> list:
    """One call on both managers, then what it must not do: return its own table (add),
    release the head first (free), call the library's slot_mapping (slots); then the reads."""
    (mine, ref, pool, tried), (kind, k, pick) = state, op
    seq, args = _intent(ref, tried, f"s{len(tried)}", kind, k, pick)
    tried[seq] = None
    method, why, hint = _CALLS[kind]
    table = ref.block_table(seq) if seq in ref.sequence_ids else []
    line = f"manager.{method}({', '.join(map(repr, (seq, *args)))})"
    pool.released = []
    own = kind == "slots"  # exercise 3: its own arithmetic, not the library's slot_mapping
    with _calls_of_library_slot_mapping() if own else nullcontext([]) as called:
        got, _ = trial.call("manager", mine, ref, method, seq, *args, why=why, hint=hint)
    if kind == "add" and isinstance(got, list):
        trial.returns_a_copy(
            line, got, f"manager.block_table({seq!r})", lambda: mine.block_table(seq)
        )
    if kind == "free" and pool.released != table[::-1]:
        trial.fail(
            causes.WRONG_ORDER if sorted(pool.released) == sorted(table) else causes.WRONG_RESULT,
            "release the table last block first (one call, or one per block from the tail): "
            "the tail is then the first block reused",
            subject=f"manager.{method}",
            line=f"{line}  # the blocks it released",
            want=table[::-1],
            got=pool.released,
        )
    if any(not module.startswith("paged_kv.") for module in called):
        name = "paged_kv.cache.block_table.slot_mapping"
        said = f"`{line}` called the library's `{name}`: exercise 3 is to write it yourself"
        fail_with(causes.CALLS_LIBRARY, f"manager.{method}", said)
    return _reads(trial, mine, ref, pool)


_LIBRARY_SLOTS = library.slot_mapping.__code__


@contextmanager
def _calls_of_library_slot_mapping() -> Iterator[list[str]]:
    """The modules that call the library's `slot_mapping` while the block runs (the library's
    own manager calls it)."""
    calls: list[str] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is _LIBRARY_SLOTS and frame.f_back:
            calls.append(frame.f_back.f_globals.get("__name__", ""))

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(previous)


def _reads(trial: Trial, mine: Any, ref: KVCacheManager, pool: BlockPool) -> list:
    """Each live sequence's table (a copy of it) and length, and the pool's free blocks."""
    reads: list = []
    for seq in ref.sequence_ids:
        table = f"manager.block_table({seq!r})"
        got = trial.read(table, partial(mine.block_table, seq))
        trial.expect(table, got, ref.block_table(seq))
        trial.returns_a_copy(table, got, table, partial(mine.block_table, seq))
        count = f"manager.num_tokens({seq!r})"
        reads.append((count, partial(mine.num_tokens, seq), ref.num_tokens(seq), ""))
    free = "every refusal takes nothing"
    return [*reads, ("pool.num_free", lambda: pool.num_free, ref.pool.num_free, free)]


def _search(
    manager_cls: Callable[[Any], Any], kinds: tuple[str, ...], trials: int, what: str, seed: int
) -> None:
    """Random trials: a pool (blocks, block size), then intents (kind, a number, a fraction)."""
    with stage("random trials on pools of up to 16 blocks"):
        draw = intents(
            lambda rng: (rng.randint(1, 16), rng.randint(1, 5)),
            lambda rng, _: (rng.choice(kinds), rng.randint(0, 14), rng.random()),
            40,
        )
        play = differential(partial(_start, manager_cls), _step)
        search(play, draw, trials=trials, seed=seed, what=what)


@exercise(1, "add_sequence and free_sequence")
def check_add_and_free(manager_cls: Callable[[Any], Any], *, seed: int = 0) -> None:
    """A new sequence gets exactly the blocks its prompt needs, or nothing; freeing it gives
    them back, last block first."""
    _search(manager_cls, ("add", "add", "free"), 60, "check_add_and_free", seed)
    passed("tables sized, refusals change nothing, tails freed first")


@exercise(2, "append_tokens")
def check_append(manager_cls: Callable[[Any], Any], *, seed: int = 0) -> None:
    """Appending allocates a block only when the last one is full, all or nothing (no frees:
    exercise 1's, checked there)."""
    _search(manager_cls, ("add", "append", "append", "append"), 80, "check_append", seed)
    passed("a block only when the last is full, all or nothing")


@exercise(3, "slot_mapping")
def check_manager_slots(manager_cls: Callable[[Any], Any], *, seed: int = 0) -> None:
    """`slot_mapping(seq_id, start=0, end=None)` gives the slot of each token start..end-1
    through the sequence's own table; `end` defaults to its length; bad ranges are refused."""
    kinds = ("add", "append", "slots", "slots", "slots")
    _search(manager_cls, kinds, 60, "check_manager_slots", seed)
    passed("slots through the table, bad ranges refused")


@exercise(None, "your parts so far")
def check_parts_so_far(manager_cls: Callable[[Any], Any], pool_cls: Callable[..., Any]) -> None:
    """Your manager on your chapter-01 pool serves a decode workload: after every operation no
    two live sequences share a slot, every token has one, and the pool counts what the
    library's KVCacheManager counts."""
    prompts = [("a", 6), ("b", 3), ("c", 9), ("d", 13)]
    ops = decode_workload(prompts, decode_steps=14, finish_after={"b": 3, "c": 8})
    pool_name = getattr(pool_cls, "__name__", "Pool")
    methods = {Add: "add_sequence", Append: "append_tokens", Free: "free_sequence"}

    def scenario(trial: Trial) -> None:
        pool = trial.run(f"pool = {pool_name}(16, 4)", pool_cls, 16, 4)
        mine = trial.run(f"manager = {name_of(manager_cls, 'Manager')}(pool)", manager_cls, pool)
        ref = KVCacheManager(16, 4, prefix_caching=False)
        for op in ops:
            # (seq_id,) or (seq_id, token_ids), the tokens as the list a caller passes
            args = [list(a) if isinstance(a, tuple) else a for a in vars(op).values()]
            method = methods[type(op)]
            trial.run(
                f"manager.{method}({', '.join(map(repr, args))})", getattr(mine, method), *args
            )
            op.apply(ref)
            owner: dict[int, Any] = {}
            for seq in ref.sequence_ids:
                line = f"manager.slot_mapping({seq!r})"
                slots = trial.read(line, lambda s=seq: list(mine.slot_mapping(s)))
                trial.expect(f"len({line})", len(slots), ref.num_tokens(seq), "one slot per token")
                for slot in slots:
                    if slot in owner:
                        trial.fail(
                            causes.WRONG_RESULT,
                            "no two tokens may share a slot, or their K/V overwrite each other "
                            "(a block handed out twice, or slots computed past the table?)",
                            line=line,
                            want=f"slots no other token holds ({slot} is {owner[slot]!r}'s)",
                            got=slots,
                        )
                    owner[slot] = seq
            free = trial.read("pool.num_free", lambda: pool.num_free)
            trial.expect("pool.num_free", free, ref.pool.num_free)

    fixed(scenario)
    if pool_cls is BlockPool and (why := _no_pool_of_yours()):
        pool_name = f"the library's BlockPool (yours: {why})"
    passed(f"your manager on {pool_name}: {len(ops)} operations, no slot shared")


def _no_pool_of_yours() -> str:
    """Why `parts.load("pool")` gives no pool, and where it looked; "" if it gives one."""
    mine, why = saved.origin("pool")
    return "" if mine is not None else f"{why}; {saved.searched()}"
