# expect: wrong_result from check_lse_merge(wrong)
def wrong(outs, lses):
    finite = lses.nan_to_num(0.0, neginf=0.0)
    return (finite / finite.sum(-1, keepdim=True))[..., None].mul(outs).sum(-2)
