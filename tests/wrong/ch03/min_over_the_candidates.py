# expect: work_grows from check_policy_contract(BucketLFU)
# min() with a C key function: no Python line per block, but a scan all the same.
patch(
    "block = next(iter(self.buckets[lowest]))",
    "block = min(self.bucket_of, key=self.bucket_of.get)",
)
