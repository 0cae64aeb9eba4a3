# expect: wrong_dtype from check_lse_merge(lse_merge)
patch("return (weights[..., None] * outs).sum(dim=-2)", "return (weights[..., None] * outs.float()).sum(dim=-2)")
