# expect: wrong_result from check_chained_hash(pythons_hash)
import hashlib


def pythons_hash(token_ids, block_size, salt=None):
    out, parent = [], None
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        key = hash((parent, salt, tuple(token_ids[start : start + block_size])))
        parent = hashlib.sha256(str(key).encode()).digest()
        out.append(parent)
    return out
