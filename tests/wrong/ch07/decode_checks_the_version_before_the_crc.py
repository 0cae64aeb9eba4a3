# expect: wrong_check_order from check_blob_codec(encode, wrong)
def wrong(blob, *, fingerprint, block_hash):
    if (
        len(blob) >= HEADER_SIZE
        and blob[:4] == MAGIC
        and FIELDS.unpack_from(blob)[1] != FORMAT_VERSION
    ):
        raise CorruptBlock("format version", reason="version")
    return decode(blob, fingerprint=fingerprint, block_hash=block_hash)
