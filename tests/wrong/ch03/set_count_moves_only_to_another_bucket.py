# expect: wrong_result from check_lfu(SetCountMovesOnlyToAnotherBucket)
class SetCountMovesOnlyToAnotherBucket(BucketLFU):
    def set_count(self, block, count):
        self.counts[block] = count
        if block in self.bucket_of and self.bucket_of[block] != min(count, MAX_BUCKET):
            self._leave(block)
            self._enter(block, count)
