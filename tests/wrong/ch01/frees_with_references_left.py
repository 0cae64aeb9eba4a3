# expect: missing_refusal from check_release(Wrong)
class Wrong(FreeListPool):
    def release(self, block_ids):
        for b in block_ids:
            if not 0 <= b < self.num_blocks or self.ref[b] == 0:
                raise InvalidBlock("bad")
        freed = []
        for b in dict.fromkeys(block_ids):
            self.ref[b] = 0
            self.free_ids.append(b)
            freed.append(b)
        return freed
