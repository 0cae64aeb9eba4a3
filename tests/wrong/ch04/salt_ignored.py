# expect: wrong_result from check_chained_hash(chained_hashes)
patch('b"no salt" if salt is None else b"salt:" + salt.encode()', 'b""')
