# expect: needless_questions from check_longest_run(wrong)
def wrong(keys, tiers):
    for tier in tiers:
        tier.count_leading(keys)
    return my_longest_run(keys, tiers)
