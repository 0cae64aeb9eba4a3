# expect: unbounded_memory from check_aging(LivesNeverDeleted)
class LivesNeverDeleted(WindowLFU):
    """forget marks the life ended (None) instead of deleting it."""

    def touch(self, block):
        life = self.life.get(block)
        if life is None:
            self.lives += 1
            life = self.life[block] = self.lives
        BucketLFU.touch(self, block)
        self.recent.append((block, life))
        if len(self.recent) > self.window:
            old, old_life = self.recent.popleft()
            if self.life.get(old) == old_life and old in self.counts:
                self.set_count(old, self.count(old) - 1)

    def forget(self, block):
        BucketLFU.forget(self, block)
        self.life[block] = None
