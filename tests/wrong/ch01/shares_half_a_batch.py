# expect: not_all_or_nothing from check_release(Wrong)
class Wrong(FreeListPool):
    def share(self, block_ids):
        for b in block_ids:
            if not 0 <= b < self.num_blocks or self.ref[b] == 0:
                raise InvalidBlock("not in use")
            self.ref[b] += 1
