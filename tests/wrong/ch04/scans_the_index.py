# expect: work_grows from check_cached_prefix(scans_the_index)
def scans_the_index(index, hashes, num_prompt_tokens, block_size):
    blocks = []
    for digest in hashes[: (num_prompt_tokens - 1) // block_size]:
        hit = next((b for h, b in index.items() if h == digest), None)
        if hit is None:
            break
        blocks.append(hit)
    return blocks
