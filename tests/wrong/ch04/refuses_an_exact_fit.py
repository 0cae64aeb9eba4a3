# expect: raised from check_allocate_table(refuses_an_exact_fit)
from paged_kv import OutOfBlocks


def refuses_an_exact_fit(pool, hits, num_blocks):
    fresh = num_blocks - len(hits)
    available = pool.num_available - sum(1 for b in hits if pool.ref_count(b) == 0)
    if fresh >= available and fresh:
        raise OutOfBlocks("short", requested=fresh, available=available)
    pool.share(hits)
    return hits + pool.allocate(fresh)
