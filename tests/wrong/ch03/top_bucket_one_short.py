# expect: wrong_result from check_lfu(TopBucketOneShort)
class TopBucketOneShort(BucketLFU):
    """Counts 254 and 255 share a bucket: the top bucket is MAX_BUCKET - 1."""

    def _enter(self, block, count):
        super()._enter(block, min(count, MAX_BUCKET - 1))

    def _leave(self, block):
        super()._leave(block)
