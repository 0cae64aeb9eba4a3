# expect: not_all_or_nothing from check_allocate_table(shares_before_checking)
def shares_before_checking(pool, hits, num_blocks):
    pool.share(hits)
    return hits + pool.allocate(num_blocks - len(hits))
