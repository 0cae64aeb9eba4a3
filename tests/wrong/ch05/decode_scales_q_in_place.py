# expect: mutates_argument from check_paged_decode(paged_decode)
patch("query = q[b, h].float() / math.sqrt(dim)", "query = q[b, h].float().div_(math.sqrt(dim))")
