# expect: wrong_result from check_longest_run(wrong)
def wrong(keys, tiers):
    return [tiers[0]] * tiers[0].count_leading(keys) if tiers else []
