# expect: wrong_state from check_allocate_table(allocates_before_sharing)
from paged_kv import OutOfBlocks


def allocates_before_sharing(pool, hits, num_blocks):
    fresh = num_blocks - len(hits)
    available = pool.num_available - sum(1 for b in hits if pool.ref_count(b) == 0)
    if fresh > available:
        raise OutOfBlocks("short", requested=fresh, available=available)
    new = pool.allocate(fresh)
    pool.share(hits)
    return hits + new
