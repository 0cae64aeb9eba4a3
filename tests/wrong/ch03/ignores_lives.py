# expect: wrong_state from check_aging(IgnoresLives)
class IgnoresLives(BucketLFU):
    def __init__(self, window=4096):
        super().__init__()
        self.window, self.recent = window, deque()

    def touch(self, block):
        super().touch(block)
        self.recent.append(block)
        if len(self.recent) > self.window:
            old = self.recent.popleft()
            if self.count(old) > 0:
                self.set_count(old, self.count(old) - 1)
