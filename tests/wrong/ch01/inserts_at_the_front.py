# expect: work_grows from check_constant_time_release(Wrong)
class Wrong(FreeListPool):
    def release(self, block_ids):
        for b, times in Counter(block_ids).items():
            if not 0 <= b < self.num_blocks or times > self.ref[b]:
                raise InvalidBlock("bad release")
        freed = []
        for b in block_ids:
            self.ref[b] -= 1
            if not self.ref[b]:
                self.free_ids.insert(0, b)
                freed.append(b)
        return freed
