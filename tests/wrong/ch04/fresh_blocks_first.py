# expect: wrong_result from check_allocate_table(allocate_table)
patch("return hits + pool.allocate(fresh)", "return pool.allocate(fresh) + hits")
