# expect: wrong_dtype from check_lse_merge(wrong)
def wrong(outs, lses):
    return lse_merge(outs.float(), lses.float())
