# expect: work_grows from check_constant_time_allocate(FreeListPool)
patch(
    "ids = [self.free_ids.pop() for _ in range(n)]",
    "ids = [b for b in range(self.num_blocks) if self.ref[b] == 0][:n]\n"
    "        self.free_ids = [b for b in self.free_ids if b not in ids]",
)
