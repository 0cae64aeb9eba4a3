# expect: not_all_or_nothing from check_release(Wrong)
class Wrong(FreeListPool):
    def release(self, block_ids):
        freed = []
        for b in block_ids:
            if not 0 <= b < self.num_blocks or self.ref[b] == 0:
                raise InvalidBlock("bad")
            self.ref[b] -= 1
            if not self.ref[b]:
                self.free_ids.append(b)
                freed.append(b)
        return freed
