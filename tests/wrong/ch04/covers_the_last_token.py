# expect: wrong_result from check_cached_prefix(cached_prefix)
patch("hashes[: (num_prompt_tokens - 1) // block_size]", "hashes")
