# expect: wrong_state from check_lfu(CountSurvivesEviction)
class CountSurvivesEviction(BucketLFU):
    def evict(self):
        lowest = (self.nonempty & -self.nonempty).bit_length() - 1
        block = next(iter(self.buckets[lowest]))
        self._leave(block)
        return block
