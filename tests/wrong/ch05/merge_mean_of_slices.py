# expect: wrong_result from check_lse_merge(lse_merge)
patch("return (weights[..., None] * outs).sum(dim=-2)", "return outs.mean(dim=-2)")  # lses ignored
