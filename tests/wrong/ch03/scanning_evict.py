# expect: work_grows from check_policy_contract(Wrong)
# An open policy whose evict scans every evictable block for the lowest count: O(n).
class Wrong(BucketLFU):
    def evict(self):
        if not self.bucket_of:
            raise InvalidBlock("nothing is evictable")
        victim = min(self.bucket_of, key=lambda b: self.counts[b])
        self.forget(victim)
        return victim
