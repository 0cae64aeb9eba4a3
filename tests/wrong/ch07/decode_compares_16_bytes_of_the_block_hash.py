# expect: missing_refusal from check_blob_codec(encode, decode)
patch("stored_hash != block_hash", "stored_hash[:16] != block_hash[:16]")
