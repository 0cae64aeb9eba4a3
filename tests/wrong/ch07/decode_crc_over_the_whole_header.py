# expect: raised from check_blob_codec(encode, decode)
patch("zlib.crc32(fields) !=", "zlib.crc32(blob[:HEADER_SIZE]) !=")  # the CRC over itself too
