# expect: work_grows from check_allocate_table(allocate_table)
patch("sum(1 for b in hits if", "sum(1 for b in range(pool.num_blocks) if b in hits and")
