# expect: missing_refusal
# check: check_release(Wrong)
class Wrong(FreeListPool):
    def release(self, block_ids):
        freed = []
        for b in block_ids:
            if self.ref[b]:
                self.ref[b] -= 1
                if not self.ref[b]:
                    self.free_ids.append(b)
                    freed.append(b)
        return freed
