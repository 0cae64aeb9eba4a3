# expect: missing_refusal from check_release(Wrong)
class Wrong(FreeListPool):
    def share(self, block_ids):
        for b in block_ids:
            if not 0 <= b < self.num_blocks:
                raise InvalidBlock("foreign")
        for b in block_ids:
            self.ref[b] += 1
