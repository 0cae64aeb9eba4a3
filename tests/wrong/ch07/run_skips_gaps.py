# expect: wrong_result from check_longest_run(wrong)
def wrong(keys, tiers):
    return [next(t for t in tiers if t.count_leading([k])) for k in keys
            if any(t.count_leading([k]) for t in tiers)]  # fmt: skip
