# expect: wrong_result from check_chained_hash(chained_hashes)
patch(
    'hashlib.sha256(parent + struct.pack(f"<{len(block)}q", *block))',
    "hashlib.sha256(str(hash((parent, salt, *block))).encode())",
)
