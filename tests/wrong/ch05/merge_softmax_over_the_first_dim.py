# expect: wrong_dim from check_lse_merge(wrong)
def wrong(outs, lses):
    weights = torch.softmax(lses, dim=0).nan_to_num(0.0)  # right only for one row
    return (weights[..., None] * outs).sum(dim=-2)
