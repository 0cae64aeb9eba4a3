# expect: wrong_result from check_lfu(MakeEvictableTwiceMovesIt)
class MakeEvictableTwiceMovesIt(BucketLFU):
    def make_evictable(self, block):
        if block in self.bucket_of:
            self._leave(block)
        super().make_evictable(block)
