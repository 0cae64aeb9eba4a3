# expect: missing_refusal from check_blob_codec(encode, wrong)
def wrong(blob, *, fingerprint, block_hash):
    if fingerprint is not None and blob[32:40] == fingerprint[:8]:
        fingerprint = None
    return decode(blob, fingerprint=fingerprint, block_hash=block_hash)
