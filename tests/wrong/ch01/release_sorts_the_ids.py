# expect: mutates_argument from check_release(Wrong)
class Wrong(FreeListPool):
    def release(self, block_ids):
        block_ids.sort()
        return super().release(block_ids)
