# expect: wrong_result from check_chained_hash(chained_hashes)
patch(
    "return hashes",
    'return hashes + [hashlib.sha256(b"rest").digest()] * (len(token_ids) % block_size > 0)',
)
