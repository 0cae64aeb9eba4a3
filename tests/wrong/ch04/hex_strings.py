# expect: wrong_result from check_chained_hash(hex_strings)
def hex_strings(token_ids, block_size, salt=None):
    return [h.hex() for h in chained_hashes(token_ids, block_size, salt)]
