# expect: wrong_result from check_chained_hash(chained_hashes)
patch("hashlib.sha256(parent + ", "hashlib.sha256(repr(salt).encode() + ")
