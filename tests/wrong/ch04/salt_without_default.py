# expect: bad_signature from check_chained_hash(chained_hashes)
patch("salt: str | None = None", "salt: str | None")
