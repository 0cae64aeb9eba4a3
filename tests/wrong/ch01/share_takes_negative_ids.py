# expect: missing_refusal from check_release(Wrong)
class Wrong(FreeListPool):
    def share(self, block_ids):
        for b in block_ids:
            if b >= self.num_blocks or self.ref[b] == 0:
                raise InvalidBlock("not in use")
        for b in block_ids:
            self.ref[b] += 1
