# expect: wrong_result from check_lse_merge(wrong)
def wrong(outs, lses):
    return (torch.exp(lses).nan_to_num(0.0)[..., None] * outs).sum(dim=-2)
