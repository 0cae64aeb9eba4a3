# expect: work_grows from check_constant_time_allocate(Wrong)
# Work in C the counters cannot see (a set built from a range): the timing backstop.
class Wrong(FreeListPool):
    def __init__(self, num_blocks, block_size=16, *, blocks_per_page=None):
        super().__init__(num_blocks, block_size, blocks_per_page=blocks_per_page)
        self.used = set()

    @property
    def num_free(self):
        return self.num_blocks - len(self.used)

    def allocate(self, n=1):
        free = set(range(self.num_blocks)).difference(self.used)
        if n > len(free):
            raise OutOfBlocks("short", requested=n, available=len(free))
        ids = [free.pop() for _ in range(n)]
        for b in ids:
            self.ref[b] = 1
            self.used.add(b)
        return ids

    def release(self, block_ids):
        freed = super().release(block_ids)
        self.used.difference_update(freed)
        return freed
