# expect: wrong_result from check_prefix_parts(chained_hashes, skips_first, allocate_table)
def skips_first(index, hashes, num_prompt_tokens, block_size):
    return cached_prefix(index, hashes, num_prompt_tokens, block_size)[1:]
