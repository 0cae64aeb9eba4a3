# expect: wrong_result
# check: check_prefix_parts(hex_strings, cached_prefix, allocate_table)
def hex_strings(token_ids, block_size, salt=None):
    return [h.hex() for h in chained_hashes(token_ids, block_size, salt)]
