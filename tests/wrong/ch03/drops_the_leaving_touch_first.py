# expect: wrong_result from check_aging(DropsTheLeavingTouchFirst)
class DropsTheLeavingTouchFirst(WindowLFU):
    def touch(self, block):
        if block not in self.life:
            self.lives += 1
            self.life[block] = self.lives
        self.recent.append((block, self.life[block]))
        if len(self.recent) > self.window:
            old, life = self.recent.popleft()
            if self.life.get(old) == life:
                self.set_count(old, self.count(old) - 1)
        BucketLFU.touch(self, block)
