# expect: missing_refusal from check_blob_codec(encode, wrong)
def wrong(blob, *, fingerprint, block_hash):
    try:
        return decode(blob, fingerprint=fingerprint, block_hash=block_hash)
    except CorruptBlock as refusal:  # one 'bad header' check left out
        if refusal.reason != "bad header":
            raise
        _, _, code, ndim, *dims = FIELDS.unpack_from(blob)[:10]
        if code in DTYPE_OF_CODE and 1 <= ndim <= MAX_DIMS and not any(dims[ndim:]):
            return None, blob[HEADER_SIZE:]  # only prod(shape) * itemsize != length is left
        raise
