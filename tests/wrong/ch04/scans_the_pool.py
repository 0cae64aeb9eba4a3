# expect: work_grows from check_allocate_table(scans_the_pool)
from paged_kv import OutOfBlocks


def scans_the_pool(pool, hits, num_blocks):
    fresh = num_blocks - len(hits)
    cached = 0
    for block in range(pool.num_blocks):
        if block in hits and pool.ref_count(block) == 0:
            cached += 1
    available = pool.num_available - cached
    if fresh > available:
        raise OutOfBlocks("short", requested=fresh, available=available)
    pool.share(hits)
    return hits + pool.allocate(fresh)
