# expect: wrong_result from check_release(Wrong)
class Wrong(FreeListPool):
    def release(self, block_ids):
        super().release(block_ids)
