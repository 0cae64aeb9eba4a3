# expect: wrong_state from check_aging(WindowLFU)
# BucketLFU.evict stops tracking its victim without calling forget, so WindowLFU.forget never
# ends the victim's life (the second patch reruns WindowLFU's cell on the patched BucketLFU).
patch("self.forget(block)", "self._leave(block)\n        self.counts.pop(block, None)")
patch("class WindowLFU(BucketLFU):", "class WindowLFU(BucketLFU):")
