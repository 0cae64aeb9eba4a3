# expect: wrong_result from check_blob_codec(wrong, decode)
def wrong(payload, *, shape, **fields):
    blob = encode(payload, shape=[*shape, *[1] * (MAX_DIMS - len(shape))], **fields)
    return blob[:7] + bytes([len(shape)]) + blob[8:]
