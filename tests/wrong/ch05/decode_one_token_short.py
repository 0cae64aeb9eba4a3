# expect: wrong_result from check_paged_decode(paged_decode)
patch("length = int(seq_lens[b])", "length = max(int(seq_lens[b]) - 1, 1)")
