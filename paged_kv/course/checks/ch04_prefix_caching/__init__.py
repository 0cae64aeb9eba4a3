"""Chapter 04 checks: the chained block hash and its encoding, the longest cached prefix, and
the all-or-nothing add that shares it (fit check before any reference).

The learner's three parts plug into `learner_manager(block_hasher=, prefix_lookup=,
allocate_table=)`; `check_prefix_parts` runs them there against the library's own.
"""

from paged_kv.course.checks.ch04_prefix_caching.allocate_table import check_allocate_table
from paged_kv.course.checks.ch04_prefix_caching.cached_prefix import check_cached_prefix
from paged_kv.course.checks.ch04_prefix_caching.chained_hash import check_chained_hash
from paged_kv.course.checks.ch04_prefix_caching.library_pieces import (
    check_copy_on_write,
    check_share_cached_prefix,
)
from paged_kv.course.checks.ch04_prefix_caching.parts_so_far import check_prefix_parts

__all__ = [
    "check_allocate_table",
    "check_cached_prefix",
    "check_chained_hash",
    "check_copy_on_write",
    "check_prefix_parts",
    "check_share_cached_prefix",
]
