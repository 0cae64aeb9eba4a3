# expect: raised from check_blob_codec(encode, wrong)
def wrong(blob, *, fingerprint, block_hash):
    return decode(blob, fingerprint=fingerprint or bytes(32), block_hash=block_hash or bytes(32))
