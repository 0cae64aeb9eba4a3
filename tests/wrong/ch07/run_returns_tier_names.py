# expect: wrong_result from check_longest_run(wrong)
def wrong(keys, tiers):
    return [tier.name for tier in my_longest_run(keys, tiers)]  # not the tiers (nor pairs)
