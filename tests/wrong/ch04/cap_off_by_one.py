# expect: wrong_result from check_cached_prefix(cap_off_by_one)
def cap_off_by_one(index, hashes, num_prompt_tokens, block_size):
    return cached_prefix(index, hashes, num_prompt_tokens + 1, block_size)
