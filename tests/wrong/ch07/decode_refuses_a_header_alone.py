# expect: raised from check_blob_codec(encode, decode)
patch("len(blob) < HEADER_SIZE", "len(blob) <= HEADER_SIZE")  # a 0-sized shape's blob is that
