# expect: not_finite from check_paged_decode(paged_decode)
patch("n = min(block_size, length - i * block_size)", "n = block_size")
