# expect: wrong_result from check_prefix_parts(chained_hashes, cached_prefix, allocate_table)
patch("return blocks", "return blocks[1:]")
