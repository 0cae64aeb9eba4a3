# expect: wrong_state from check_lfu(BucketLFU)
patch("self.counts.setdefault(block, 0)", "self.counts.setdefault(block, 1)")
