# expect: not_all_or_nothing from check_allocate_table(forgets_the_revived_hits)
from paged_kv import OutOfBlocks


def forgets_the_revived_hits(pool, hits, num_blocks):
    fresh = num_blocks - len(hits)
    if fresh > pool.num_available:
        raise OutOfBlocks("short", requested=fresh, available=pool.num_available)
    pool.share(hits)
    return hits + pool.allocate(fresh)
