# expect: unbounded_memory from check_aging(GenerationCounterPerBlock)


class GenerationCounterPerBlock(WindowLFU):
    """A life number per block, bumped on forget and never deleted."""

    def touch(self, block):
        self.life.setdefault(block, 0)
        BucketLFU.touch(self, block)
        self.recent.append((block, self.life[block]))
        if len(self.recent) > self.window:
            old, life = self.recent.popleft()
            if self.life.get(old) == life and old in self.counts:
                self.set_count(old, self.count(old) - 1)

    def forget(self, block):
        BucketLFU.forget(self, block)
        self.life[block] = self.life.get(block, 0) + 1
