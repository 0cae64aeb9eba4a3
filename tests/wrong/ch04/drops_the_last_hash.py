# expect: wrong_result from check_cached_prefix(drops_the_last_hash)
def covers_the_last_token(index, hashes, num_prompt_tokens, block_size):
    blocks = []
    for digest in hashes:
        if digest not in index:
            break
        blocks.append(index[digest])
    return blocks


def drops_the_last_hash(index, hashes, num_prompt_tokens, block_size):
    return covers_the_last_token(index, hashes[:-1], num_prompt_tokens, block_size)
