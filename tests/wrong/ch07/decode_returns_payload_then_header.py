# expect: wrong_result from check_blob_codec(encode, decode)
patch("    return BlobHeader(", "    header = BlobHeader(")
patch("payload_crc), payload", "payload_crc)\n    return payload, header")
