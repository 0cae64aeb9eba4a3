# expect: mutates_argument from check_chained_hash(chained_hashes)
patch("hashes = []", "hashes = []\n    del token_ids[len(token_ids) // block_size * block_size :]")
