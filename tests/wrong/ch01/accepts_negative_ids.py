# expect: missing_refusal from check_release(Wrong)
class Wrong(FreeListPool):
    def release(self, block_ids):
        for b, times in Counter(block_ids).items():
            if b >= self.num_blocks or times > self.ref[b]:
                raise InvalidBlock("bad")
        return FreeListPool.release(self, [b % self.num_blocks for b in block_ids])
