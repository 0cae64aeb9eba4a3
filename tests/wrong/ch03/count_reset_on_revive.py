# expect: wrong_state
# check: check_lfu(CountResetOnRevive)
class CountResetOnRevive(BucketLFU):
    def revive(self, block):
        self._leave(block)
        self.counts[block] = 0
