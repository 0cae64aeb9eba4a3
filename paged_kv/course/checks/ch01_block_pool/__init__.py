"""Chapter 01 checks: a block pool allocates, shares, releases and frees pages like
`BlockPool`, in constant work per block.

The pool under test has `BlockPool`'s core interface: `pool_cls(num_blocks, block_size,
blocks_per_page=None)`, `num_free`, `ref_count(b)`, `allocate(n)`, `share(ids)`,
`release(ids)` (returning the blocks that lost their last reference) and `free_pages()`.
"""

from paged_kv.course.checks.ch01_block_pool.allocate_release import check_allocate, check_release
from paged_kv.course.checks.ch01_block_pool.constant_work import (
    check_constant_time_allocate,
    check_constant_time_release,
)
from paged_kv.course.checks.ch01_block_pool.free_pages import check_free_pages

__all__ = [
    "check_allocate",
    "check_constant_time_allocate",
    "check_constant_time_release",
    "check_free_pages",
    "check_release",
]
