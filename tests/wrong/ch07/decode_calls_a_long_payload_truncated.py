# expect: wrong_error from check_blob_codec(encode, wrong)
def wrong(blob, *, fingerprint, block_hash):
    try:
        return decode(blob, fingerprint=fingerprint, block_hash=block_hash)
    except CorruptBlock as refusal:
        if refusal.reason == "length":
            raise CorruptBlock(str(refusal), reason="truncated") from None
        raise
