# expect: wrong_result from check_chained_hash(truncated)
def truncated(token_ids, block_size, salt=None):
    return [h[:8] for h in chained_hashes(token_ids, block_size, salt)]
