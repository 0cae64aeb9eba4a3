# expect: endless_loop from check_longest_run(wrong)
def wrong(keys, tiers):
    sources = []
    while len(sources) < len(keys):
        for tier in tiers:
            n = tier.count_leading(keys[len(sources) :])
            if n:
                sources += [tier] * n
                break
    return sources
