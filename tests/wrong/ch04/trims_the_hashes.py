# expect: mutates_argument from check_cached_prefix(cached_prefix)
patch("blocks = []", "del hashes[(num_prompt_tokens - 1) // block_size :]\n    blocks = []")
