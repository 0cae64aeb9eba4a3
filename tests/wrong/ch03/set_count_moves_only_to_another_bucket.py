# expect: wrong_result from check_lfu(BucketLFU)
patch(
    "if block in self.bucket_of:\n            self._leave(block)\n            self._enter",
    "if block in self and self.bucket_of[block] != min(count, MAX_BUCKET):\n"
    "            self._leave(block)\n            self._enter",
)
