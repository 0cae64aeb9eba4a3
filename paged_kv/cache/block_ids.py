"""Checks every pool layer makes before it changes anything: ids that are its own, and a
release that drops no block more often than it is referenced (a double free)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import countOf
from typing import cast

from paged_kv.errors import InvalidBlock
from paged_kv.validation import as_int


def check_block_ids(block_ids: Iterable[object], num_blocks: int) -> list[int]:
    """`block_ids` as a list of ids of a pool of `num_blocks`: plain in-range ints at C speed,
    anything else one by one (`InvalidBlock` for an id that is not the pool's)."""
    given = block_ids if type(block_ids) is list else list(block_ids)  # read, never changed
    if given and countOf(map(type, given), int) == len(given):
        ids = cast("list[int]", given)  # every element is an int: their types were just counted
        if min(ids) >= 0 and max(ids) < num_blocks:
            return ids
    return [check_block_id(b, num_blocks) for b in given]


def check_block_id(block_id: object, num_blocks: int) -> int:
    """`block_id` as an int in 0..num_blocks-1, or `InvalidBlock` saying which ids are valid."""
    if type(block_id) is int and 0 <= block_id < num_blocks:
        return block_id  # the common case, first
    number = as_int(block_id)
    if number is None:
        raise InvalidBlock(f"block ids are ints, got {block_id!r}.")
    if not 0 <= number < num_blocks:
        raise InvalidBlock(
            f"block {block_id} does not belong to this pool (ids are 0..{num_blocks - 1})."
        )
    return number


def check_drops(ids: list[int], ref_count: Callable[[int], int]) -> None:
    """`InvalidBlock` if `ids` drops some block more often than `ref_count` says it is held."""
    drops: dict[int, int] = {}
    for block_id in ids:
        drops[block_id] = drops.get(block_id, 0) + 1
    for block_id, times in drops.items():
        refs = ref_count(block_id)
        if times > refs:
            raise InvalidBlock(
                f"block {block_id} has {refs} reference(s) but release was asked to drop "
                f"{times}: a double free. Release each reference once."
            )
