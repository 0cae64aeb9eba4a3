# expect: mutates_argument from check_paged_decode(paged_decode)
patch("    return out", "    k_cache.zero_()  # done with it\n    return out")
