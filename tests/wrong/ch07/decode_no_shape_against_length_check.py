# expect: missing_refusal from check_blob_codec(encode, decode)
patch("math.prod(shape) * DTYPES[dtype][1] != length", "False")
