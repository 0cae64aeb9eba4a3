# expect: bad_signature from check_chained_hash(salt_without_default)
def salt_without_default(token_ids, block_size, salt):
    return chained_hashes(token_ids, block_size, salt)
