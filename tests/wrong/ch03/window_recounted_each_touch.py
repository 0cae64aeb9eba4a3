# expect: too_slow from check_aging(WindowLFU)
# Right counts, but each touch recounts its block over the whole window: O(window) a touch.
patch(
    "super().touch(block)\n        self.recent.append((block, self.life[block]))",
    "self.recent.append(mine := (block, self.life[block]))\n"
    "        self.set_count(block, sum(1 for touch in self.recent if touch == mine))",
)
