# expect: wrong_error from check_blob_codec(encode, wrong)
def wrong(blob, *, fingerprint, block_hash):
    FIELDS.unpack(blob[: FIELDS.size])  # struct.error on a blob shorter than the fields
    return decode(blob, fingerprint=fingerprint, block_hash=block_hash)
