# expect: missing_refusal from check_blob_codec(encode, decode)
patch("zlib.crc32(fields) != CRC.unpack_from(blob, FIELDS.size)[0]", "False")
