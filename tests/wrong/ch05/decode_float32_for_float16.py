# expect: wrong_dtype from check_paged_decode(paged_decode)
patch("out = torch.zeros_like(q)", "out = torch.zeros_like(q, dtype=torch.float32)")
