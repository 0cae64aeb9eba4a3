# expect: missing_refusal from check_blob_codec(encode, decode)
patch(" or any(dims[ndim:])", "")  # a non-zero unused shape slot passes
