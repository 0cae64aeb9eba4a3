# expect: wrong_error from check_allocate_table(allocate_table)
patch("requested=fresh, available=available", "requested=num_blocks, available=pool.num_free")
