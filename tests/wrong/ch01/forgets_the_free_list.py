# expect: wrong_state from check_release(Wrong)
class Wrong(FreeListPool):
    def release(self, block_ids):
        freed = super().release(block_ids)
        for b in freed:
            self.free_ids.remove(b)
        return freed
