# expect: wrong_result from check_blob_codec(encode, decode)
patch("[0] * (MAX_DIMS - len(shape))", "[1] * (MAX_DIMS - len(shape))")
