# expect: missing_refusal from check_blob_codec(encode, wrong)
def wrong(blob, *, fingerprint, block_hash):
    if block_hash is not None and blob[64:80] == block_hash[:16]:
        block_hash = None
    return decode(blob, fingerprint=fingerprint, block_hash=block_hash)
