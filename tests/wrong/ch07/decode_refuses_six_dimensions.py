# expect: raised from check_blob_codec(encode, wrong)
def wrong(blob, *, fingerprint, block_hash):
    if len(blob) >= HEADER_SIZE and FIELDS.unpack_from(blob)[3] == MAX_DIMS:
        raise CorruptBlock("too many dimensions", reason="bad header")  # 1 <= ndim < MAX_DIMS
    return decode(blob, fingerprint=fingerprint, block_hash=block_hash)
