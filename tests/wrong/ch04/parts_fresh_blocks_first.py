# expect: wrong_result from check_prefix_parts(chained_hashes, cached_prefix, allocate_table)
patch("return hits + pool.allocate(fresh)", "return pool.allocate(fresh) + hits")
