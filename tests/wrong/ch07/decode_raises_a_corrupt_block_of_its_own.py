# expect: wrong_error from check_blob_codec(encode, decode)
# a class of its own, not paged_kv.errors.CorruptBlock (which is a ValueError too)
patch(
    "from paged_kv.errors import CorruptBlock",
    """class CorruptBlock(ValueError):
    def __init__(self, message, *, reason):
        super().__init__(message)
        self.reason = reason""",
)
