# expect: work_grows from check_lfu(MinOverTheCandidates)
class MinOverTheCandidates(BucketLFU):
    """min() with a C key function: no Python line per block, but a scan all the same."""

    def evict(self):
        block = min(self.bucket_of, key=self.bucket_of.get)
        self.forget(block)
        return block
