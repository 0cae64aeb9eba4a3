# expect: not_done from check_lfu(BucketLFU)
# touch written without set_count, which is left a stub.
stub = 'raise NotImplementedError("BucketLFU.set_count: replace this line with your code")'
patch("self.counts[block] = count\n", stub + "\n")
touch = "self.counts[block] = self.count(block) + 1\n        if block in self: self.revive(block)"
patch("self.set_count(block, self.count(block) + 1)", touch + "; self.make_evictable(block)")
