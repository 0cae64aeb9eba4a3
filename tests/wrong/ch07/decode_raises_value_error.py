# expect: wrong_error from check_blob_codec(encode, wrong)
def wrong(blob, *, fingerprint, block_hash):
    try:
        return decode(blob, fingerprint=fingerprint, block_hash=block_hash)
    except CorruptBlock as refusal:
        raise ValueError(str(refusal)) from None  # not CorruptBlock (nor is a class of its own)
