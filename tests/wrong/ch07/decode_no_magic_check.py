# expect: missing_refusal from check_blob_codec(encode, decode)
patch("magic != MAGIC", "False")
