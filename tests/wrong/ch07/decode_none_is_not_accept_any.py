# expect: raised from check_blob_codec(encode, decode)
patch("fingerprint is not None and stored_fp != fingerprint", "stored_fp != fingerprint")
