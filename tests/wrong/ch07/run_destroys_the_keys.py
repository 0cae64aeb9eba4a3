# expect: mutates_argument
# check: check_longest_run(wrong)
def wrong(keys, tiers):
    sources = []
    while keys:
        for tier in tiers:
            n = tier.count_leading(keys)
            if n:
                sources += [tier] * n
                del keys[:n]
                break
        else:
            break
    return sources
