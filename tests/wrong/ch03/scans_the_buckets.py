# expect: work_grows from check_lfu(ScansTheBuckets)
class ScansTheBuckets(BucketLFU):
    """Walks up the 256 buckets to the lowest non-empty one: constant, but not the bitmask."""

    def evict(self):
        if not self.nonempty:
            raise InvalidBlock("nothing is evictable")
        block = next(iter(next(b for b in self.buckets if b)))
        self.forget(block)
        return block
