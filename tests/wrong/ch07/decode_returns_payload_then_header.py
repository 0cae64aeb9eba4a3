# expect: wrong_result from check_blob_codec(encode, wrong)
def wrong(blob, *, fingerprint, block_hash):
    header, payload = decode(blob, fingerprint=fingerprint, block_hash=block_hash)
    return payload, header
