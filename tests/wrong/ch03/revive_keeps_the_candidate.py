# expect: missing_refusal from check_lfu(ReviveKeepsTheCandidate)
class ReviveKeepsTheCandidate(BucketLFU):
    def revive(self, block):
        pass
