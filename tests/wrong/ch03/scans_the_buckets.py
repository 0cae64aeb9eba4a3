# expect: work_grows from check_lfu(BucketLFU)
# Walks up the 256 buckets to the lowest non-empty one: constant, but not the bitmask.
patch(
    "block = next(iter(self.buckets[lowest]))",
    "block = next(iter(next(b for b in self.buckets if b)))",
)
