# expect: wrong_result from check_cached_prefix(covers_the_last_token)
def covers_the_last_token(index, hashes, num_prompt_tokens, block_size):
    blocks = []
    for digest in hashes:
        if digest not in index:
            break
        blocks.append(index[digest])
    return blocks
