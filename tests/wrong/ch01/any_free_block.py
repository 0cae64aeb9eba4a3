# expect: wrong_state from check_free_pages(Wrong)
# A page with any free block counted as free.
class Wrong(FreeListPool):
    def free_pages(self):
        per = self.blocks_per_page
        return [p for p in range(self.num_blocks // per) if 0 in self.ref[p * per : (p + 1) * per]]
