# expect: wrong_result from check_blob_codec(encode, decode)
patch("CRC.pack(zlib.crc32(fields))", "bytes(CRC.size)")
