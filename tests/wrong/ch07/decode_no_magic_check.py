# expect: missing_refusal from check_blob_codec(encode, wrong)
def wrong(blob, *, fingerprint, block_hash):
    try:
        return decode(blob, fingerprint=fingerprint, block_hash=block_hash)
    except CorruptBlock as refusal:  # the 'bad magic' check left out
        if refusal.reason == "bad magic":
            return None, blob[HEADER_SIZE:]
        raise
