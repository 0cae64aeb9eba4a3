# expect: unbounded_memory from check_policy_contract(GhostsNeverTrimmed)
class GhostsNeverTrimmed(BucketLFU):
    """Remembers the count of every evicted block, for ever."""

    def __init__(self):
        super().__init__()
        self.ghosts = {}

    def touch(self, block):
        if block not in self.counts and block in self.ghosts:
            self.counts[block] = self.ghosts.pop(block)
        super().touch(block)

    def evict(self):
        if self.nonempty:
            lowest = (self.nonempty & -self.nonempty).bit_length() - 1
            victim = next(iter(self.buckets[lowest]))
            self.ghosts[victim] = self.count(victim)
        return super().evict()
