# expect: wrong_state from check_aging(WindowOverAnEvictThatSkipsForget)
class WindowOverAnEvictThatSkipsForget(WindowLFU):
    """BucketLFU.evict that stops tracking its victim without calling forget."""

    def evict(self):
        if not self.nonempty:
            raise InvalidBlock("nothing is evictable")
        lowest = (self.nonempty & -self.nonempty).bit_length() - 1
        block = next(iter(self.buckets[lowest]))
        self._leave(block)
        self.counts.pop(block, None)
        return block
