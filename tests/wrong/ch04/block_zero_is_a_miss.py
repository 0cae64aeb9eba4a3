# expect: wrong_result from check_cached_prefix(cached_prefix)
patch("if digest not in index:", "if not index.get(digest):")
