# expect: missing_refusal from check_blob_codec(encode, decode)
patch("zlib.crc32(payload) != payload_crc", "False")
