# expect: wrong_result from check_lfu(BucketLFU)
patch("self.bucket_of:\n            return", "self.bucket_of:\n            self._leave(block)")
