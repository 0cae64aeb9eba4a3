# expect: mutates_argument from check_cached_prefix(swallows_the_read_only_error)
import contextlib


def swallows_the_read_only_error(index, hashes, num_prompt_tokens, block_size):
    with contextlib.suppress(Exception):
        index[b"mine"] = 0
    return cached_prefix(index, hashes, num_prompt_tokens, block_size)
