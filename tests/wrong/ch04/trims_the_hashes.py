# expect: mutates_argument from check_cached_prefix(trims_the_hashes)
def trims_the_hashes(index, hashes, num_prompt_tokens, block_size):
    del hashes[(num_prompt_tokens - 1) // block_size :]
    return cached_prefix(index, hashes, len(hashes) * block_size + 1, block_size)
