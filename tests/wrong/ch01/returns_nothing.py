# expect: wrong_result
# check: check_release(Wrong)
class Wrong(FreeListPool):
    def release(self, block_ids):
        super().release(block_ids)
