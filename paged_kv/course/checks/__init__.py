"""Exercise checks, one module per chapter: the library's own scenarios, run against the
learner's code.

Each `check_*` is a declaration on the one harness (`harness`): the learner's object and the
library's reference driven through the same random operations, compared after each; a
difference raises `CheckFailed` naming one cause (`causes`), with the shrunk lines that
replay it; a stub still in place raises `ExerciseNotDone`. In Jupyter both print only their
message (no traceback into the checks). The test suite runs the same checks on the library,
so both meet one standard.
"""

from paged_kv.course.checks.ch01_block_pool import (
    check_allocate,
    check_constant_time_allocate,
    check_constant_time_release,
    check_free_pages,
    check_release,
)
from paged_kv.course.checks.ch02_block_tables import (
    check_add_and_free,
    check_append,
    check_blocks_needed,
    check_grow_block_table,
    check_manager_slots,
    check_parts_so_far,
    check_slot_mapping,
)
from paged_kv.course.checks.ch03_eviction import check_aging, check_lfu, check_policy_contract
from paged_kv.course.checks.ch04_prefix_caching import (
    check_allocate_table,
    check_cached_prefix,
    check_chained_hash,
    check_copy_on_write,
    check_prefix_parts,
    check_share_cached_prefix,
)
from paged_kv.course.checks.ch05_paged_attention import (
    check_lse_merge,
    check_online_softmax,
    check_paged_decode,
    check_write_kv,
)
from paged_kv.course.checks.ch06_serving_engine import (
    check_admission,
    check_capstone,
    check_preemption,
    check_serves_like_dense,
)
from paged_kv.course.checks.ch07_beyond_one_process import (
    check_blob_codec,
    check_circuit_breaker,
    check_longest_run,
)
from paged_kv.course.checks.cost import count_lines_executed
from paged_kv.course.checks.failures import CheckFailed, ExerciseNotDone, stubs_as_not_done

# Every check reports a stub as "not done yet", in one line (the labelled ones do already).
globals().update(
    {
        name: stubs_as_not_done(check)
        for name, check in list(globals().items())
        if name.startswith("check_")
    }
)

__all__ = [
    "CheckFailed",
    "ExerciseNotDone",
    "check_add_and_free",
    "check_admission",
    "check_aging",
    "check_allocate",
    "check_allocate_table",
    "check_append",
    "check_blob_codec",
    "check_blocks_needed",
    "check_cached_prefix",
    "check_capstone",
    "check_chained_hash",
    "check_circuit_breaker",
    "check_constant_time_allocate",
    "check_constant_time_release",
    "check_copy_on_write",
    "check_free_pages",
    "check_grow_block_table",
    "check_lfu",
    "check_longest_run",
    "check_lse_merge",
    "check_manager_slots",
    "check_online_softmax",
    "check_paged_decode",
    "check_parts_so_far",
    "check_policy_contract",
    "check_preemption",
    "check_prefix_parts",
    "check_release",
    "check_serves_like_dense",
    "check_share_cached_prefix",
    "check_slot_mapping",
    "check_write_kv",
    "count_lines_executed",
]
