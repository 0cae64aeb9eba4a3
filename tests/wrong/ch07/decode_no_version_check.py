# expect: missing_refusal from check_blob_codec(encode, decode)
patch("version != FORMAT_VERSION", "False")
