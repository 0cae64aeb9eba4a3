# expect: wrong_error from check_blob_codec(encode, decode)
patch("DTYPE_OF_CODE.get(code)", "DTYPE_OF_CODE[code]")  # KeyError for a code no dtype has
