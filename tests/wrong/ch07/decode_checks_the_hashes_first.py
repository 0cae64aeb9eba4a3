# expect: wrong_check_order from check_blob_codec(encode, decode)
patch(
    "    dtype = DTYPE_OF_CODE.get(code)",
    """    if fingerprint is not None and stored_fp != fingerprint:  # before the shape and length
        raise CorruptBlock("another model's block", reason="foreign fingerprint")
    dtype = DTYPE_OF_CODE.get(code)""",
)
