# expect: needless_questions from check_longest_run(wrong)
def wrong(keys, tiers):
    sources = []
    for key in keys:
        tier = next((t for t in tiers if t.count_leading([key])), None)
        if tier is None:
            break
        sources.append(tier)
    return sources
