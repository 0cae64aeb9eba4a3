# expect: work_grows from check_constant_time_allocate(Wrong)
# list.pop(0) shifts every other free id: O(free blocks), in C.
class Wrong(FreeListPool):
    def __init__(self, num_blocks, block_size=16, *, blocks_per_page=None):
        super().__init__(num_blocks, block_size, blocks_per_page=blocks_per_page)
        self.free_ids.reverse()

    def allocate(self, n=1):
        if n > self.num_free:
            raise OutOfBlocks("short", requested=n, available=self.num_free)
        ids = [self.free_ids.pop(0) for _ in range(n)]
        for b in ids:
            self.ref[b] = 1
        return ids
