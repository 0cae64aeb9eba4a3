# expect: wrong_result from check_lfu(BucketLFU)
patch("block = next(iter(self.buckets[lowest]))", "block = next(reversed(self.buckets[lowest]))")
