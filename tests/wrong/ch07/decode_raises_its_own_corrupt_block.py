# expect: wrong_error
# check: check_blob_codec(encode, wrong)
class CorruptBlockOfMyOwn(Exception):
    pass


def wrong(blob, *, fingerprint, block_hash):
    try:
        return decode(blob, fingerprint=fingerprint, block_hash=block_hash)
    except CorruptBlock as refusal:
        raise CorruptBlockOfMyOwn(str(refusal)) from None
