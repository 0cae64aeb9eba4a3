# expect: not_all_or_nothing from check_allocate_table(allocate_table)
patch("pool.num_available - sum(1 for b in hits if pool.ref_count(b) == 0)", "pool.num_available")
