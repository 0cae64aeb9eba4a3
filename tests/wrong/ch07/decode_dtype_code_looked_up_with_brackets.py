# expect: wrong_error from check_blob_codec(encode, wrong)
def wrong(blob, *, fingerprint, block_hash):
    if len(blob) >= HEADER_SIZE and blob[:4] == MAGIC:
        DTYPE_OF_CODE[FIELDS.unpack_from(blob)[2]]  # KeyError for a code no dtype has
    return decode(blob, fingerprint=fingerprint, block_hash=block_hash)
