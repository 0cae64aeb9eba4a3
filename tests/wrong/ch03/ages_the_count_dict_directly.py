# expect: wrong_result from check_aging(WindowLFU)
# The leaving touch lowers the count itself, so the block stays in its old bucket.
patch("self.set_count(old, self.count(old) - 1)", "self.counts[old] -= 1")
