# expect: wrong_result
# check: check_prefix_parts(chained_hashes, skips_the_first_block, allocate_table)
def skips_the_first_block(index, hashes, num_prompt_tokens, block_size):
    return cached_prefix(index, hashes, num_prompt_tokens, block_size)[1:]
