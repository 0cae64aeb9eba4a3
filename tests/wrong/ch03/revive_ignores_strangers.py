# expect: missing_refusal from check_lfu(ReviveIgnoresStrangers)
class ReviveIgnoresStrangers(BucketLFU):
    def revive(self, block):
        if block in self.bucket_of:
            self._leave(block)
