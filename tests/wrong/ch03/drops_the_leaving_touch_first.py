# expect: wrong_result from check_aging(WindowLFU)
# The touch leaving the window is dropped before the new one is counted: the two blocks move
# to the recent end of their buckets in the wrong order.
patch("super().touch(block)\n        self.recent", "self.recent")
patch("self.count(old) - 1)\n", "self.count(old) - 1)\n        super().touch(block)\n")
