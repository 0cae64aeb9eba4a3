# expect: wrong_error from check_blob_codec(encode, decode)
patch('reason="truncated" if len(payload) < length else "length"', 'reason="truncated"')
