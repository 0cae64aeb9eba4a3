# expect: wrong_result from check_lfu(MostRecentFirst)
class MostRecentFirst(BucketLFU):
    def evict(self):
        lowest = (self.nonempty & -self.nonempty).bit_length() - 1
        block = next(reversed(self.buckets[lowest]))
        self.forget(block)
        return block
