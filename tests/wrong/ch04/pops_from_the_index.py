# expect: mutates_argument from check_cached_prefix(cached_prefix)
patch("blocks.append(index[digest])", "blocks.append(index.pop(digest))")
