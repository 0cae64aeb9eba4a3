"""Chapter 02 checks: a manager keeps one block table per sequence over a pool, grows it only
when the last block is full, frees it tail first, and every call is all or nothing.

The manager under test is `manager_cls(pool)` with `add_sequence(seq_id, token_ids)`,
`append_tokens(seq_id, token_ids)`, `free_sequence(seq_id)`, `block_table(seq_id)`,
`num_tokens(seq_id)` and `slot_mapping(seq_id, start=0, end=None)`. The three block-table
functions of the library are checked by `check_blocks_needed`, `check_slot_mapping` and
`check_grow_block_table`.
"""

from paged_kv.course.checks.ch02_block_tables.library_functions import (
    check_blocks_needed,
    check_grow_block_table,
    check_slot_mapping,
)
from paged_kv.course.checks.ch02_block_tables.manager import (
    check_add_and_free,
    check_append,
    check_manager_slots,
    check_parts_so_far,
)

__all__ = [
    "check_add_and_free",
    "check_append",
    "check_blocks_needed",
    "check_grow_block_table",
    "check_manager_slots",
    "check_parts_so_far",
    "check_slot_mapping",
]
