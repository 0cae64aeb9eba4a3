# expect: wrong_state from check_policy_contract(BucketLFU)
# forget drops the count and leaves the block evictable.
patch("self._leave(block)\n        self.counts.pop", "pass\n        self.counts.pop")
