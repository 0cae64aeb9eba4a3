# expect: work_grows from check_cached_prefix(cached_prefix)
patch("if digest not in index:", "if digest not in dict(index.items()):")
