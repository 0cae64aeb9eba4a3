# expect: missing_refusal from check_blob_codec(encode, wrong)
def wrong(blob, *, fingerprint, block_hash):
    try:
        return decode(blob, fingerprint=fingerprint, block_hash=block_hash)
    except CorruptBlock as refusal:  # no magic, version, dtype or shape check
        if refusal.reason in ("bad magic", "version", "bad header"):
            return None, blob[HEADER_SIZE:]
        raise
