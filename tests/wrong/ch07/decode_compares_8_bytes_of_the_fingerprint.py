# expect: missing_refusal from check_blob_codec(encode, decode)
patch("stored_fp != fingerprint", "stored_fp[:8] != fingerprint[:8]")
