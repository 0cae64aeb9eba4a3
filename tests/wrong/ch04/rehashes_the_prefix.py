# expect: work_grows from check_chained_hash(rehashes_the_prefix)
import hashlib
import struct


def rehashes_the_prefix(token_ids, block_size, salt=None):
    root = b"no salt" if salt is None else b"salt:" + salt.encode()
    return [
        hashlib.sha256(root + struct.pack(f"<{end}q", *token_ids[:end])).digest()
        for end in range(block_size, len(token_ids) + 1, block_size)
    ]
