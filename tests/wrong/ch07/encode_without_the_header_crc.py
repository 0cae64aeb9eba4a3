# expect: wrong_result from check_blob_codec(wrong, decode)
def wrong(payload, **fields):
    blob = encode(payload, **fields)
    return blob[:108] + b"\0\0\0\0" + blob[112:]
