# expect: wrong_result from check_cached_prefix(any_cached_hash)
def any_cached_hash(index, hashes, num_prompt_tokens, block_size):
    cap = (num_prompt_tokens - 1) // block_size
    return [index[h] for h in hashes[:cap] if h in index]
