# expect: wrong_result from check_chained_hash(partial_block_too)
import hashlib


def partial_block_too(token_ids, block_size, salt=None):
    out = chained_hashes(token_ids, block_size, salt)
    if len(token_ids) % block_size:
        out.append(hashlib.sha256(repr(token_ids).encode()).digest())
    return out
