# expect: wrong_check_order from check_blob_codec(encode, wrong)
def wrong(blob, *, fingerprint, block_hash):
    if len(blob) >= HEADER_SIZE and zlib.crc32(blob[:108]) != CRC.unpack_from(blob, 108)[0]:
        raise CorruptBlock("header checksum", reason="header checksum")
    return decode(blob, fingerprint=fingerprint, block_hash=block_hash)
