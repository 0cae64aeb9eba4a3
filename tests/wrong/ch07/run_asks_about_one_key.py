# expect: wrong_result from check_longest_run(wrong)
def wrong(keys, tiers):
    return [t for t in tiers[:1] if keys and t.count_leading(keys[0])]
