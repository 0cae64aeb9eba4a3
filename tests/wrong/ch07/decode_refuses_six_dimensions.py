# expect: raised from check_blob_codec(encode, decode)
patch("1 <= ndim <= MAX_DIMS", "1 <= ndim < MAX_DIMS")
