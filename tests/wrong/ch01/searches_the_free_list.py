# expect: work_grows from check_constant_time_release(FreeListPool)
# A double free detected with `in` on the free list: O(free blocks), in C.
patch(
    "if count > self.ref[block_id]:", "if block_id in self.free_ids or count > self.ref[block_id]:"
)
