# expect: wrong_result from check_allocate(FreeListPool)
patch(
    "ids = [self.free_ids.pop() for _ in range(n)]", "ids = [self.free_ids.pop()] * n if n else []"
)
