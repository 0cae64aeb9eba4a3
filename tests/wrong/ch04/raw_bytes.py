# expect: raised from check_chained_hash(chained_hashes)
patch('struct.pack(f"<{len(block)}q", *block)', "bytes(block)")
