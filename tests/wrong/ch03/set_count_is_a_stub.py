# expect: not_done from check_lfu(SetCountIsAStub)
# touch written without set_count, which is left a stub.
class SetCountIsAStub(BucketLFU):
    def set_count(self, block, count):
        raise NotImplementedError("BucketLFU.set_count: replace this line with your code")

    def touch(self, block):
        self.counts[block] = self.count(block) + 1
        if block in self.bucket_of:
            self._leave(block)
            self._enter(block, self.counts[block])
