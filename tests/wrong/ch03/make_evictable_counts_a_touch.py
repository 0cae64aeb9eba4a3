# expect: wrong_state from check_lfu(MakeEvictableCountsATouch)
class MakeEvictableCountsATouch(BucketLFU):
    def make_evictable(self, block):
        if block not in self.counts:
            self.counts[block] = 1
        super().make_evictable(block)
