# expect: wrong_result from check_chained_hash(two_bytes)
import hashlib
import struct


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


two_bytes = _chain(lambda block: struct.pack(f"<{len(block)}H", *(t & 0xFFFF for t in block)))
