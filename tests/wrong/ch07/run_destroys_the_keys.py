# expect: mutates_argument from check_longest_run(my_longest_run)
patch(
    "    return sources",
    "    del keys[: len(sources)]  # the keys it found a tier for, consumed\n    return sources",
)
