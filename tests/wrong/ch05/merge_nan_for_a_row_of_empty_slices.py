# expect: not_finite from check_lse_merge(wrong)
def wrong(outs, lses):
    weights = torch.exp(lses - torch.logsumexp(lses, dim=-1, keepdim=True))
    return (weights[..., None] * outs).sum(dim=-2)  # exp(-inf - -inf) = NaN: 0 · NaN
