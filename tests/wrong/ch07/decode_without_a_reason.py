# expect: wrong_error from check_blob_codec(encode, wrong)
def wrong(blob, *, fingerprint, block_hash):
    try:
        return decode(blob, fingerprint=fingerprint, block_hash=block_hash)
    except CorruptBlock as refusal:
        raise CorruptBlock(str(refusal)) from None  # reason="corrupt"
