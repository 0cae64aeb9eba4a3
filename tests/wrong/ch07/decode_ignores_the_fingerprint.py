# expect: missing_refusal from check_blob_codec(encode, wrong)
def wrong(blob, *, fingerprint, block_hash):
    return decode(blob, fingerprint=None, block_hash=block_hash)
