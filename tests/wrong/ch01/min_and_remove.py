# expect: work_grows from check_constant_time_allocate(Wrong)
# Linear, but in C: min() and list.remove.
class Wrong(FreeListPool):
    def allocate(self, n=1):
        if n > self.num_free:
            raise OutOfBlocks("short", requested=n, available=self.num_free)
        ids = []
        for _ in range(n):
            b = min(self.free_ids)
            self.free_ids.remove(b)
            self.ref[b] = 1
            ids.append(b)
        return ids
