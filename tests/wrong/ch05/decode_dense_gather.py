# expect: not_paged from check_paged_decode(paged_decode)
patch("k_cache[block, :n", "k_cache[blocks].flatten(0, 1)[i * block_size :][:n")  # all at once
