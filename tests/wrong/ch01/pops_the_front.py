# expect: work_grows from check_constant_time_allocate(FreeListPool)
# list.pop(0) shifts every other free id: O(free blocks), in C.
patch(
    "ids = [self.free_ids.pop() for _ in range(n)]",
    "ids = [self.free_ids.pop(0) for _ in range(n)]",
)
