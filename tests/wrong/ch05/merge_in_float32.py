# expect: wrong_dtype from check_lse_merge(lse_merge)
patch("* outs).sum(dim=-2)", "* outs.float()).sum(dim=-2)")
