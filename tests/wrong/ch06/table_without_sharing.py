# expect: part_at_fault from check_capstone(Scheduler, parts={"allocate_table": wrong})
def wrong(pool, hits, num_blocks):
    return hits + pool.allocate(num_blocks - len(hits))
