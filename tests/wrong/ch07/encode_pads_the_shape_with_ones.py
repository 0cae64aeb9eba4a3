# expect: wrong_result
# check: check_blob_codec(wrong, decode)
def wrong(payload, *, dtype, shape, fingerprint, block_hash):
    padded = [*shape, *[1] * (MAX_DIMS - len(shape))]
    blob = encode(
        payload, dtype=dtype, shape=padded, fingerprint=fingerprint, block_hash=block_hash
    )
    return blob[:7] + bytes([len(shape)]) + blob[8:]
