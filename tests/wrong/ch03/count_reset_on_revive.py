# expect: wrong_state from check_lfu(CountResetOnRevive)
class CountResetOnRevive(BucketLFU):
    def revive(self, block):
        self._leave(block)
        self.counts[block] = 0
