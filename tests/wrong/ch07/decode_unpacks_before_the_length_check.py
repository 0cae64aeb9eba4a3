# expect: wrong_error from check_blob_codec(encode, decode)
patch(
    "    if len(blob) < HEADER_SIZE:",
    """    FIELDS.unpack(blob[: FIELDS.size])  # struct.error on a blob shorter than the fields
    if len(blob) < HEADER_SIZE:""",
)
