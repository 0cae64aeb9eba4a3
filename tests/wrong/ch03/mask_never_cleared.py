# expect: raised from check_lfu(MaskNeverCleared)
class MaskNeverCleared(BucketLFU):
    def _leave(self, block):
        bucket = self.bucket_of.pop(block)
        del self.buckets[bucket][block]
