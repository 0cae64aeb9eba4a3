# expect: missing_refusal from check_allocate_table(swallows_errors)
from paged_kv import OutOfBlocks


def swallows_errors(pool, hits, num_blocks):
    fresh = num_blocks - len(hits)
    available = pool.num_available - sum(1 for b in hits if pool.ref_count(b) == 0)
    if fresh > available:
        raise OutOfBlocks("short", requested=fresh, available=available)
    try:
        pool.share(hits)
        return hits + pool.allocate(fresh)
    except Exception:
        return list(hits)
