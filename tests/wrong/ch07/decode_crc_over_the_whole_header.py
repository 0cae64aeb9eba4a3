# expect: raised from check_blob_codec(encode, wrong)
def wrong(blob, *, fingerprint, block_hash):
    if len(blob) >= HEADER_SIZE and zlib.crc32(blob[:HEADER_SIZE]) != 0:  # the CRC over itself
        raise CorruptBlock("header checksum", reason="header checksum")
    return decode(blob, fingerprint=fingerprint, block_hash=block_hash)
