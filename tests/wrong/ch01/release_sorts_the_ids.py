# expect: mutates_argument from check_release(FreeListPool)
# Sorts the caller's list (was also release_clears_the_ids: the same mistake).
patch("times = Counter(block_ids)", "block_ids.sort()\n        times = Counter(block_ids)")
