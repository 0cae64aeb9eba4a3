# expect: wrong_result from check_lfu(EvictsTheSecondLowest)
class EvictsTheSecondLowest(BucketLFU):
    def evict(self):
        ordered = sorted(self.bucket_of, key=lambda b: self.bucket_of[b])
        block = ordered[1] if len(ordered) > 3 else ordered[0]
        self.forget(block)
        return block
