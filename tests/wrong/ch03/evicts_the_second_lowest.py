# expect: wrong_result from check_lfu(BucketLFU)
patch(
    "block = next(iter(self.buckets[lowest]))",
    "block = sorted(self.bucket_of, key=self.bucket_of.get)[len(self) > 3]",
)
