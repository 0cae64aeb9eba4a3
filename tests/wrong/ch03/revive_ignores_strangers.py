# expect: missing_refusal from check_lfu(BucketLFU)
patch("count.\n        self._leave", "count.\n        if block in self: self._leave")
