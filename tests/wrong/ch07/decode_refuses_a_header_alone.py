# expect: raised from check_blob_codec(encode, wrong)
def wrong(blob, *, fingerprint, block_hash):
    if len(blob) <= HEADER_SIZE:  # a blob of a 0-sized shape is the header alone
        raise CorruptBlock("too short", reason="truncated")
    return decode(blob, fingerprint=fingerprint, block_hash=block_hash)
