# expect: wrong_state
# check: check_free_pages(Wrong)
# The same mistake as forgets_the_free_list, met by exercise 3's check.
class Wrong(FreeListPool):
    def release(self, block_ids):
        freed = super().release(block_ids)
        for b in freed:
            self.free_ids.remove(b)
        return freed
