# expect: missing_scale from check_paged_decode(paged_decode)
patch("query = q[b, h].float() / math.sqrt(dim)", "query = q[b, h].float()")
