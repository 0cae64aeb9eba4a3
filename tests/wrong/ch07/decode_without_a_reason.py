# expect: wrong_error from check_blob_codec(encode, decode)
patch(', reason="truncated")\n    fields', ')  # reason="corrupt"\n    fields')
