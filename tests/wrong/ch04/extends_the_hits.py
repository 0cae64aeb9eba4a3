# expect: mutates_argument from check_allocate_table(allocate_table)
patch("return hits + pool.allocate(fresh)", "hits.extend(pool.allocate(fresh))\n    return hits")
