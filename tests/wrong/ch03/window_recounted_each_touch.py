# expect: too_slow from check_aging(Wrong)
# Right counts, but each touch recounts its block over the whole window: O(window) a touch.
class Wrong(WindowLFU):
    def touch(self, block):
        if block not in self.life:
            self.lives += 1
            self.life[block] = self.lives
        mine = (block, self.life[block])
        self.recent.append(mine)
        self.set_count(block, sum(1 for touch in self.recent if touch == mine))
        if len(self.recent) > self.window:
            old, life = self.recent.popleft()
            if self.life.get(old) == life:
                self.set_count(old, self.count(old) - 1)
