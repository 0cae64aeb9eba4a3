# expect: wrong_error from check_allocate_table(wrong_available)
from paged_kv import OutOfBlocks


def wrong_available(pool, hits, num_blocks):
    fresh = num_blocks - len(hits)
    available = pool.num_available - sum(1 for b in hits if pool.ref_count(b) == 0)
    if fresh > available:
        raise OutOfBlocks("short", requested=num_blocks, available=pool.num_free)
    pool.share(hits)
    return hits + pool.allocate(fresh)
