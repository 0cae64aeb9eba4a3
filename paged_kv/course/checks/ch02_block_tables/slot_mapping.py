"""Exercise 3 of chapter 02: a manager's `slot_mapping` goes through the sequence's own table
and refuses bad ranges."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from paged_kv.cache.block_pool import BlockPool
from paged_kv.cache.block_table import slot_mapping as reference_slot_mapping
from paged_kv.course.checks.ch02_block_tables.manager_trials import (
    expect_copy,
    expect_enough_blocks,
    manager_name,
)
from paged_kv.course.checks.failures import exercise, passed
from paged_kv.course.checks.replay import Replay, fixed
from paged_kv.errors import InvalidArgument, UnknownSequence


@exercise(3, "slot_mapping")
def check_manager_slots(manager_cls: Callable[[Any], Any], *, seed: int = 0) -> None:
    """`slot_mapping(seq_id, start=0, end=None)` gives the slot of each token start..end-1
    through the sequence's own table; `end` defaults to its length; bad ranges are refused."""
    name = manager_name(manager_cls)
    rng = random.Random(seed)
    for trial in range(40):
        size = rng.randint(1, 5)
        num_blocks = rng.randint(4, 12)
        r = Replay(f"pool = BlockPool({num_blocks}, {size})")

        def scenario(r: Replay, size: int = size, num_blocks: int = num_blocks) -> None:
            pool = BlockPool(num_blocks, size)
            m = r.run(f"manager = {name}(pool)", manager_cls, pool)
            r.run("manager.add_sequence('other', [0])", m.add_sequence, "other", [0])
            n = rng.randint(1, (num_blocks - 1) * size)
            r.run(
                f"manager.add_sequence('a', list(range({n})))", m.add_sequence, "a", list(range(n))
            )
            r.run("manager.free_sequence('other')", m.free_sequence, "other")
            table = list(expect_enough_blocks(r, m, "a", n, size))
            expect_copy(r, m, "a")
            want = reference_slot_mapping(table, size, 0, n)
            got = r.read("manager.slot_mapping('a')", m.slot_mapping, "a")
            _slots(r, "manager.slot_mapping('a')", got, want, table, size, (0, n, n))
            got = r.run("manager.slot_mapping('a', 0, 0)", m.slot_mapping, "a", 0, 0)
            _slots(r, "manager.slot_mapping('a', 0, 0)", got, [], table, size, (0, 0, n))
            start = rng.randint(0, n)
            end = rng.randint(start, n)
            got = r.read(
                f"manager.slot_mapping('a', {start}, {end})", m.slot_mapping, "a", start, end
            )
            line = f"manager.slot_mapping('a', {start}, {end})"
            _slots(r, line, got, want[start:end], table, size, (start, end, n))
            for bad in [(0, n + 1), (-1, n), (min(n, 2), min(n, 2) - 1)]:
                r.raises(
                    InvalidArgument,
                    f"manager.slot_mapping('a', {bad[0]}, {bad[1]})",
                    m.slot_mapping,
                    "a",
                    *bad,
                )
            r.raises(UnknownSequence, "manager.slot_mapping('zz')", m.slot_mapping, "zz")

        fixed(f"Every step of the check (trial {trial}, seed={seed})", scenario, r)
    passed("slots through the table, bad ranges refused")


def _slots(
    r: Replay, line: str, got: Any, want: list[int], table: list[int], size: int, span: tuple
) -> None:
    got = list(got) if isinstance(got, list | tuple | range) else got
    if got == want:
        return
    start, end, n = span

    def slots(a: int, b: int) -> list[int]:
        return [table[t // size] * size + t % size for t in range(a, min(b, len(table) * size))]

    hint = "token t is at offset t % block_size of physical block table[t // block_size]"
    if got == slots(start, len(table) * size) and "," not in line:  # the default end
        hint = "by default `end` is the sequence's length, not the table's capacity"
    elif end == 0 and got == slots(start, n):
        hint = (
            "end=0 was treated as no end: only None means the sequence's length, and "
            "`end or n` mistakes 0 for None; write `n if end is None else end`"
        )
    elif got == slots(start, end + 1):
        hint = "`end` is exclusive: tokens start..end-1"
    r.fail(
        f"slots: {hint}",
        f"with table {table} and block_size {size}, `{line}` should be {want}, got {got!r} "
        f"({hint})",
    )
