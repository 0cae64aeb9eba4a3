# expect: wrong_result from check_chained_hash(chained_hashes)
patch("hashes.append(parent)", "hashes.append(parent[:8])")
