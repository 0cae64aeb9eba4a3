# expect: wrong_state from check_aging(WindowLFU)
patch("self.life.pop(block, None)", "pass")
