# expect: raised from check_chained_hash(raw_bytes)
import hashlib


def _chain(
    encode, salt_bytes=lambda salt: b"no salt" if salt is None else b"salt:" + salt.encode()
):
    def hashes(token_ids, block_size, salt=None):
        parent = salt_bytes(salt)
        out = []
        for start in range(0, len(token_ids) - block_size + 1, block_size):
            parent = hashlib.sha256(parent + encode(token_ids[start : start + block_size])).digest()
            out.append(parent)
        return out

    return hashes


raw_bytes = _chain(bytes)
