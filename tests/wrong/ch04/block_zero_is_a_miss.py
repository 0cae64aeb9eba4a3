# expect: wrong_result from check_cached_prefix(block_zero_is_a_miss)
def block_zero_is_a_miss(index, hashes, num_prompt_tokens, block_size):
    blocks = []
    for digest in hashes[: (num_prompt_tokens - 1) // block_size]:
        block = index.get(digest)
        if not block:
            break
        blocks.append(block)
    return blocks
