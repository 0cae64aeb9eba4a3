# expect: wrong_state from check_aging(WindowLFU)
# A touch leaving the window lowers its block's count, whichever life of it it was.
patch("if self.life.get(old) == life:", "if self.count(old) > 0:")
