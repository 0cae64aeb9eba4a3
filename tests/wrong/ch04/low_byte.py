# expect: wrong_result from check_chained_hash(chained_hashes)
patch('struct.pack(f"<{len(block)}q", *block)', "bytes(t & 0xFF for t in block)")
