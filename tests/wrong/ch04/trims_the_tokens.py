# expect: mutates_argument from check_chained_hash(trims_the_tokens)
def trims_the_tokens(token_ids, block_size, salt=None):
    del token_ids[len(token_ids) // block_size * block_size :]
    return chained_hashes(token_ids, block_size, salt)
