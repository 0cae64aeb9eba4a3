# expect: work_grows from check_lfu(ListBuckets)
class ListBuckets(BucketLFU):
    """Buckets as lists: `remove` searches the bucket, which grows with the cache."""

    def __init__(self):
        super().__init__()
        self.buckets = [[] for _ in range(MAX_BUCKET + 1)]

    def evict(self):
        lowest = (self.nonempty & -self.nonempty).bit_length() - 1
        block = self.buckets[lowest][0]
        self.forget(block)
        return block

    def _enter(self, block, count):
        bucket = min(count, MAX_BUCKET)
        self.buckets[bucket].append(block)
        self.bucket_of[block] = bucket
        self.nonempty |= 1 << bucket

    def _leave(self, block):
        bucket = self.bucket_of.pop(block)
        self.buckets[bucket].remove(block)
        if not self.buckets[bucket]:
            self.nonempty &= ~(1 << bucket)
