# expect: wrong_dim from check_lse_merge(lse_merge)
patch("torch.softmax(lses, dim=-1)", "torch.softmax(lses, dim=0)")  # right only for one row
