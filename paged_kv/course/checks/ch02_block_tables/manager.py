"""Chapter 02's manager checks: the learner's `manager_cls(pool)` and the library's
`KVCacheManager` (prefix caching off) take the same random adds, appends, frees and slot
mappings, each on a `BlockPool` of the same size, and must agree after every call: the same
tables (both pools hand out blocks in the same order), token counts, free blocks and refusals.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from paged_kv.cache.block_pool import BlockPool
from paged_kv.cache.manager import KVCacheManager
from paged_kv.course.checks import causes
from paged_kv.course.checks.failures import exercise, passed, stage
from paged_kv.course.checks.harness import Trial, fixed, search
from paged_kv.study.operations import Add, Append, Free, decode_workload


class RecordingPool(BlockPool):
    """A `BlockPool` that remembers the blocks released, in order (for the tail-first rule)."""

    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        super().__init__(num_blocks, block_size)
        self.released: list[int] = []

    def release(self, block_ids: Any) -> list[int]:
        ids = list(block_ids)
        freed = super().release(ids)
        self.released += ids
        return freed


def manager_name(cls: Any) -> str:
    return getattr(getattr(cls, "func", cls), "__name__", "Manager")


def _draw(kinds: tuple[str, ...]) -> Callable[[random.Random], list[Any]]:
    """A pool (blocks, block size), then intents (kind, a number, a fraction)."""

    def draw(rng: random.Random) -> list[Any]:
        ops: list[Any] = [(rng.randint(1, 16), rng.randint(1, 5))]
        ops += [(rng.choice(kinds), rng.randint(0, 14), rng.random()) for _ in range(40)]
        return ops

    return draw


def _play(manager_cls: Callable[[Any], Any]) -> Callable[[list[Any], Trial], None]:
    def play(ops: list[Any], trial: Trial) -> None:
        num_blocks, size = ops[0]
        pool = RecordingPool(num_blocks, size)
        trial.note(f"pool = BlockPool({num_blocks}, {size})")
        mine = trial.run(f"manager = {manager_name(manager_cls)}(pool)", manager_cls, pool)
        ref = KVCacheManager(num_blocks, size, prefix_caching=False)
        live: list[Any] = []
        gone = ["zz"]  # ids freed or refused, and one never seen
        for number, (kind, k, pick) in enumerate(ops[1:]):
            seq = (
                live[int(pick * len(live))]
                if live and pick > 0.1
                else gone[int(pick * 97) % len(gone)]
            )
            if kind == "add":
                duplicate = bool(pick <= 0.1 and live)
                seq = live[0] if duplicate else f"s{number}"
                empty = pick >= 0.95 or (duplicate and k == 0)  # a live id: still a duplicate
                _add(trial, mine, ref, seq, [] if empty else list(range(max(k, duplicate))))
            elif kind == "append":
                tokens = list(range(100, 100 + k % 7))
                handed = trial.hand(tokens)
                trial.same(
                    f"manager.append_tokens({seq!r}, {tokens})",
                    lambda s=seq, t=handed: mine.append_tokens(s, t),
                    lambda s=seq, t=tokens: ref.append_tokens(s, t),
                    why=f"{seq!r} is not live, or the pool is short: an unknown id is refused "
                    "even with nothing to append",
                    hint="a new block only when the last one is full",
                )
            elif kind == "free":
                _free(trial, mine, ref, pool, seq)
            elif kind == "slots":
                _slots(trial, mine, ref, seq, k, pick)
            gone += [s for s in live if s not in ref.sequence_ids]
            gone += [f"s{number}"] if kind == "add" and f"s{number}" not in ref.sequence_ids else []
            live = [s for s in ref.sequence_ids]
            _compare(trial, mine, ref, pool, live)

    return play


def _add(trial: Trial, mine: Any, ref: KVCacheManager, seq: str, tokens: list[int]) -> None:
    handed = trial.hand(tokens)
    shown = tokens if len(tokens) < 4 else f"list(range({len(tokens)}))"
    line = f"manager.add_sequence({seq!r}, {shown})"
    got, _ = trial.same(
        line,
        lambda: mine.add_sequence(seq, handed),
        lambda: ref.add_sequence(seq, tokens),
        why="a live id, an empty prompt, or too few free blocks",
        hint="a prompt of n tokens takes ceil(n / block_size) blocks",
    )
    if isinstance(got, list):
        trial.returns_a_copy(
            line, got, f"manager.block_table({seq!r})", lambda: mine.block_table(seq)
        )


def _free(trial: Trial, mine: Any, ref: KVCacheManager, pool: RecordingPool, seq: str) -> None:
    table = ref.block_table(seq) if seq in ref.sequence_ids else []
    pool.released.clear()
    line = f"manager.free_sequence({seq!r})"
    trial.same(line, lambda: mine.free_sequence(seq), lambda: ref.free_sequence(seq))
    if pool.released != table[::-1]:
        cause = (
            causes.WRONG_ORDER if sorted(pool.released) == sorted(table) else causes.WRONG_RESULT
        )
        trial.fail(
            cause,
            "release the table last block first (one call, or one per block from the tail): "
            "the tail is then the first block reused",
            subject=line,
            line=f"{line}  # the blocks it released",
            want=table[::-1],
            got=pool.released,
        )


def _slots(trial: Trial, mine: Any, ref: KVCacheManager, seq: str, k: int, pick: float) -> None:
    n = ref.num_tokens(seq) if seq in ref.sequence_ids else 0
    start, end = sorted((k % (n + 2), int(pick * 997) % (n + 2)))
    spans: list[tuple[int, int | None]] = [
        (0, None),
        (start, None),
        (start, end),
        (0, 0),
        (-1, n),
        (end, start),
    ]
    start, end = spans[(k + int(pick * 10)) % len(spans)]
    args = "" if (start, end) == (0, None) else f", {start}" if end is None else f", {start}, {end}"
    line = f"manager.slot_mapping({seq!r}{args})"
    known = seq in ref.sequence_ids
    trial.same(
        line,
        lambda: mine.slot_mapping(seq, start, end),
        lambda: ref.slot_mapping(seq, start, end),
        why=f"it needs 0 <= start <= end <= {n}" if known else f"{seq!r} is not live",
        hint="token t lives at table[t // block_size] * block_size + t % block_size; only "
        "end=None means the sequence's length (end=0 is an empty range)",
    )


def _compare(
    trial: Trial, mine: Any, ref: KVCacheManager, pool: BlockPool, live: list[Any]
) -> None:
    for seq in live:
        table = f"manager.block_table({seq!r})"
        got = trial.read(table, lambda s=seq: mine.block_table(s))
        trial.expect(table, got, ref.block_table(seq))
        trial.returns_a_copy(table, got, table, lambda s=seq: mine.block_table(s))
        count = f"manager.num_tokens({seq!r})"
        trial.expect(
            count, trial.read(count, lambda s=seq: mine.num_tokens(s)), ref.num_tokens(seq)
        )
    trial.expect("pool.num_free", pool.num_free, ref.pool.num_free, "every refusal takes nothing")


@exercise(1, "add_sequence and free_sequence")
def check_add_and_free(manager_cls: Callable[[Any], Any], *, seed: int = 0) -> None:
    """A new sequence gets exactly the blocks its prompt needs, or nothing; freeing it gives
    them back, last block first."""
    with stage("random trials on pools of up to 16 blocks"):
        search(
            _play(manager_cls),
            _draw(("add", "add", "free")),
            trials=60,
            seed=seed,
            what="check_add_and_free",
        )
    passed("tables sized, refusals change nothing, tails freed first")


@exercise(2, "append_tokens")
def check_append(manager_cls: Callable[[Any], Any], *, seed: int = 0) -> None:
    """Appending allocates a block only when the last one is full, all or nothing."""
    kinds = ("add", "append", "append", "append")  # no frees: exercise 1's, checked there
    with stage("random trials on pools of up to 16 blocks"):
        search(_play(manager_cls), _draw(kinds), trials=80, seed=seed, what="check_append")
    passed("a block only when the last is full, all or nothing")


@exercise(3, "slot_mapping")
def check_manager_slots(manager_cls: Callable[[Any], Any], *, seed: int = 0) -> None:
    """`slot_mapping(seq_id, start=0, end=None)` gives the slot of each token start..end-1
    through the sequence's own table; `end` defaults to its length; bad ranges are refused."""
    kinds = ("add", "append", "slots", "slots", "slots")
    with stage("random trials on pools of up to 16 blocks"):
        search(_play(manager_cls), _draw(kinds), trials=60, seed=seed, what="check_manager_slots")
    passed("slots through the table, bad ranges refused")


@exercise(None, "your parts so far")
def check_parts_so_far(manager_cls: Callable[[Any], Any], pool_cls: Callable[..., Any]) -> None:
    """Your manager on your chapter-01 pool serves a decode workload: after every operation no
    two live sequences share a slot, every token has one, and the pool counts what the
    library's KVCacheManager counts."""
    ops = decode_workload(
        [("a", 6), ("b", 3), ("c", 9), ("d", 13)], decode_steps=14, finish_after={"b": 3, "c": 8}
    )
    pool_name = getattr(pool_cls, "__name__", "Pool")

    def scenario(trial: Trial) -> None:
        pool = trial.run(f"pool = {pool_name}(16, 4)", pool_cls, 16, 4)
        mine = trial.run(f"manager = {manager_name(manager_cls)}(pool)", manager_cls, pool)
        ref = KVCacheManager(16, 4, prefix_caching=False)
        for op in ops:
            if isinstance(op, Add | Append):
                method = "add_sequence" if isinstance(op, Add) else "append_tokens"
                tokens = list(op.token_ids)
                trial.run(
                    f"manager.{method}({op.seq_id!r}, {tokens})",
                    getattr(mine, method),
                    op.seq_id,
                    tokens,
                )
            elif isinstance(op, Free):
                trial.run(f"manager.free_sequence({op.seq_id!r})", mine.free_sequence, op.seq_id)
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
            trial.expect(
                "pool.num_free",
                trial.read("pool.num_free", lambda: pool.num_free),
                ref.pool.num_free,
            )

    fixed(scenario)
    if pool_cls is BlockPool:
        pool_name = "the library's BlockPool (no pool of yours saved with parts.save in chapter 01)"
    passed(f"your manager on {pool_name}: {len(ops)} operations, no slot shared")
