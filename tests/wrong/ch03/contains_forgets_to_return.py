# expect: wrong_state from check_lfu(BucketLFU)
patch("return block in self.bucket_of", "block in self.bucket_of")
