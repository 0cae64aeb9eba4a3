# expect: missing_refusal
# check: check_lfu(ReviveKeepsTheCandidate)
class ReviveKeepsTheCandidate(BucketLFU):
    def revive(self, block):
        pass
