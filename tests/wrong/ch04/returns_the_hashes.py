# expect: wrong_result from check_cached_prefix(returns_the_hashes)
def returns_the_hashes(index, hashes, num_prompt_tokens, block_size):
    found = cached_prefix(index, hashes, num_prompt_tokens, block_size)
    return hashes[: len(found)]
