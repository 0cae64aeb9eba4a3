# expect: unbounded_memory from check_aging(WindowLFU)
# forget marks the life ended (None) instead of deleting it.
patch("if block not in self.life:", "if self.life.get(block) is None:")
patch("self.life.pop(block, None)", "self.life[block] = None")
