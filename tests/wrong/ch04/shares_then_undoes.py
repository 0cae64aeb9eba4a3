# expect: not_all_or_nothing from check_allocate_table(shares_then_undoes)
from paged_kv import OutOfBlocks


def shares_then_undoes(pool, hits, num_blocks):
    pool.share(hits)
    try:
        return hits + pool.allocate(num_blocks - len(hits))
    except OutOfBlocks:
        pool.release(hits)
        raise
