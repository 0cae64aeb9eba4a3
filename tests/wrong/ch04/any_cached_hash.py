# expect: wrong_result from check_cached_prefix(cached_prefix)
patch("break", "continue")
