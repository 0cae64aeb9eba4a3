# expect: work_grows from check_constant_time_release(Wrong)
# A double free detected with `in` on the free list: O(free blocks), in C.
class Wrong(FreeListPool):
    def release(self, block_ids):
        for b in block_ids:
            if not 0 <= b < self.num_blocks or b in self.free_ids:
                raise InvalidBlock("bad")
        return super().release(block_ids)
