# expect: work_grows from check_cached_prefix(looks_up_all_then_cuts)
def looks_up_all_then_cuts(index, hashes, num_prompt_tokens, block_size):
    found = [index.get(h) for h in hashes]
    blocks = []
    for block in found[: (num_prompt_tokens - 1) // block_size]:
        if block is None:
            break
        blocks.append(block)
    return blocks
