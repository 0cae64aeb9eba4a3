# expect: wrong_state from check_aging(HalvesPeriodically)
class HalvesPeriodically(BucketLFU):
    def __init__(self, window=4096):
        super().__init__()
        self.window, self.touches = window, 0

    def touch(self, block):
        super().touch(block)
        self.touches += 1
        if self.touches % self.window == 0:
            for b in list(self.counts):
                self.set_count(b, self.counts[b] // 2)
