# expect: wrong_result from check_aging(AgesTheCountDictDirectly)
class AgesTheCountDictDirectly(WindowLFU):
    def touch(self, block):
        if block not in self.life:
            self.lives += 1
            self.life[block] = self.lives
        BucketLFU.touch(self, block)
        self.recent.append((block, self.life[block]))
        if len(self.recent) > self.window:
            old, life = self.recent.popleft()
            if self.life.get(old) == life:
                self.counts[old] -= 1
