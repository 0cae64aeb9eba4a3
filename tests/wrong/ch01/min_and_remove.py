# expect: work_grows from check_constant_time_allocate(FreeListPool)
# Linear, but in C: min(), list.index and list.pop(i).
patch(
    "ids = [self.free_ids.pop() for _ in range(n)]",
    "ids = [self.free_ids.pop(self.free_ids.index(min(self.free_ids))) for _ in range(n)]",
)
