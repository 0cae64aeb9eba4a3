# expect: wrong_state from check_release(Wrong)
# Forgets to put the pool's last block back: only a random trial reaches it.
class Wrong(FreeListPool):
    def release(self, block_ids):
        freed = super().release(block_ids)
        if self.num_blocks - 1 in freed:
            self.free_ids.remove(self.num_blocks - 1)
        return freed
