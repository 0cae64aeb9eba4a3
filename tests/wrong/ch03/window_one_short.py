# expect: wrong_state from check_aging(WindowLFU)
patch("if len(self.recent) > self.window:", "if len(self.recent) >= self.window:")
