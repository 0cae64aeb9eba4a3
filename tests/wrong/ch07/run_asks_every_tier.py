# expect: needless_questions
# check: check_longest_run(wrong)
def wrong(keys, tiers):
    for tier in tiers:
        tier.count_leading(keys)
    return my_longest_run(keys, tiers)
