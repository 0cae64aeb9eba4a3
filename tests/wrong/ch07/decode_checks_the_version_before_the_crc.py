# expect: wrong_check_order from check_blob_codec(encode, decode)
patch(
    "    if zlib.crc32(fields) !=",
    """    if version != FORMAT_VERSION:
        raise CorruptBlock(f"format version {version}", reason="version")
    if zlib.crc32(fields) !=""",
)
