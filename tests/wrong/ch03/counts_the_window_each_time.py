# expect: wrong_result from check_aging(CountsTheWindowEachTime)
class CountsTheWindowEachTime(WindowLFU):
    """Counts recomputed from the window with deque.count: right, but a scan in C."""

    def touch(self, block):
        if block not in self.life:
            self.lives += 1
            self.life[block] = self.lives
        self.recent.append((block, self.life[block]))
        if len(self.recent) > self.window:
            old, life = self.recent.popleft()
            if self.life.get(old) == life:
                self.set_count(old, self.recent.count((old, life)))
        self.set_count(block, self.recent.count((block, self.life[block])))
