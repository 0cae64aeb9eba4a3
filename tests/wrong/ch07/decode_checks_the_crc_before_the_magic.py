# expect: wrong_check_order from check_blob_codec(encode, decode)
patch(
    "    if magic != MAGIC:",
    """    if zlib.crc32(fields) != CRC.unpack_from(blob, FIELDS.size)[0]:
        raise CorruptBlock("header checksum", reason="header checksum")
    if magic != MAGIC:""",
)
