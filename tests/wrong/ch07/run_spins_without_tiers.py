# expect: endless_loop from check_longest_run(wrong)
def wrong(keys, tiers):
    sources = []
    while len(sources) < len(keys):
        found = False
        for tier in tiers:
            n = tier.count_leading(keys[len(sources) :])
            if n:
                sources += [tier] * n
                found = True
                break
        if tiers and not found:
            break
    return sources
