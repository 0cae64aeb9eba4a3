# expect: missing_refusal from check_blob_codec(encode, decode)
patch("not 1 <= ndim <= MAX_DIMS", "ndim > MAX_DIMS")
