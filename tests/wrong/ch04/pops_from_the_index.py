# expect: mutates_argument from check_cached_prefix(pops_from_the_index)
def pops_from_the_index(index, hashes, num_prompt_tokens, block_size):
    blocks = cached_prefix(index, hashes, num_prompt_tokens, block_size)
    for digest in hashes[: len(blocks)]:
        index.pop(digest)
    return blocks
