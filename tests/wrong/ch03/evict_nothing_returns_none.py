# expect: missing_refusal from check_lfu(EvictNothingReturnsNone)
class EvictNothingReturnsNone(BucketLFU):
    def evict(self):
        if not self.nonempty:
            return None
        return super().evict()
