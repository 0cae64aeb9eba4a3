# expect: wrong_result from check_longest_run(wrong)
def wrong(keys, tiers):
    return tuple(my_longest_run(keys, tiers))
