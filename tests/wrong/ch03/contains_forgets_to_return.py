# expect: wrong_state from check_lfu(ContainsForgetsToReturn)
class ContainsForgetsToReturn(BucketLFU):
    def __contains__(self, block):
        block in self.bucket_of  # noqa: B015 (the mistake: no return)
