# expect: wrong_state from check_lfu(BucketLFU)
patch("self.forget(block)", "self._leave(block)")
