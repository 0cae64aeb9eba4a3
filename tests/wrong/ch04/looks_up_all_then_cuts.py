# expect: work_grows from check_cached_prefix(cached_prefix)
patch(
    "blocks = []",
    "found = [index.get(h) for h in hashes]  # every hash, then the cut\n    blocks = []",
)
