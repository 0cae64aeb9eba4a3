# expect: work_grows from check_constant_time_allocate(Wrong)
class Wrong(FreeListPool):
    def allocate(self, n=1):
        free = [b for b in range(self.num_blocks) if self.ref[b] == 0]
        if n > len(free):
            raise OutOfBlocks("short", requested=n, available=len(free))
        for b in free[:n]:
            self.ref[b] = 1
            self.free_ids.remove(b)
        return free[:n]
