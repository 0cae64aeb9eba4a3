# expect: wrong_result from check_chained_hash(unchained)
import hashlib


def unchained(token_ids, block_size, salt=None):
    return [
        hashlib.sha256(repr((salt, token_ids[i : i + block_size])).encode()).digest()
        for i in range(0, len(token_ids) - block_size + 1, block_size)
    ]
