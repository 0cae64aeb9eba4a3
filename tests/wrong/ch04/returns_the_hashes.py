# expect: wrong_result from check_cached_prefix(cached_prefix)
patch("blocks.append(index[digest])", "blocks.append(digest)")
