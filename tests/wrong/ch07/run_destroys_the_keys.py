# expect: mutates_argument from check_longest_run(wrong)
def wrong(keys, tiers):
    sources = my_longest_run(keys, tiers)
    del keys[: len(sources)]  # the keys it has found a tier for, "consumed"
    return sources
