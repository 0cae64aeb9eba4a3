# expect: wrong_check_order from check_blob_codec(encode, wrong)
def wrong(blob, *, fingerprint, block_hash):
    if fingerprint is not None and blob[32:64] != fingerprint:  # before length, version, header
        raise CorruptBlock("another model's block", reason="foreign fingerprint")
    if block_hash is not None and blob[64:96] != block_hash:
        raise CorruptBlock("another block", reason="foreign block")
    return decode(blob, fingerprint=fingerprint, block_hash=block_hash)
