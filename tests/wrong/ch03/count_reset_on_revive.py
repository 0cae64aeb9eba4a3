# expect: wrong_state from check_lfu(BucketLFU)
patch("count.\n        self._leave", "count.\n        self.counts[block] = 0\n        self._leave")
