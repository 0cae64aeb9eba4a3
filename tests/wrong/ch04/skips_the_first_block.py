# expect: wrong_result from check_cached_prefix(skips_the_first_block)
def skips_the_first_block(index, hashes, num_prompt_tokens, block_size):
    return cached_prefix(index, hashes, num_prompt_tokens, block_size)[1:]
