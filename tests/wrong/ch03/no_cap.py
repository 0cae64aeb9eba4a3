# expect: raised from check_lfu(NoCap)
class NoCap(BucketLFU):
    def _enter(self, block, count):
        self.buckets[count][block] = None
        self.bucket_of[block] = count
        self.nonempty |= 1 << count
