# expect: missing_refusal from check_blob_codec(encode, wrong)
def wrong(blob, *, fingerprint, block_hash):
    try:
        return decode(blob, fingerprint=fingerprint, block_hash=block_hash)
    except CorruptBlock as refusal:  # one 'bad header' check left out
        if refusal.reason == "bad header" and FIELDS.unpack_from(blob)[3] == 0:
            return None, blob[HEADER_SIZE:]
        raise
