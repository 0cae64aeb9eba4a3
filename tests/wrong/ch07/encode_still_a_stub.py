# expect: not_done
# check: check_blob_codec(wrong, decode)
def wrong(payload, *, dtype, shape, fingerprint, block_hash):
    raise NotImplementedError("encode: replace this line with your code")
