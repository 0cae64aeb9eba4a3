# expect: library_refused from check_capstone(Scheduler, parts={"prefix_lookup": wrong})
def wrong(index, hashes, num_prompt_tokens, block_size):
    return [index[h] for h in hashes[: (num_prompt_tokens - 1) // block_size] if h in index][1:]
