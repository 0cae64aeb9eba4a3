# expect: mutates_argument from check_release(Wrong)
# Keeps the caller's list and changes it on a later call: seen through the kept alias.
class Wrong(FreeListPool):
    def share(self, block_ids):
        super().share(block_ids)
        self.last = block_ids

    def release(self, block_ids):
        if hasattr(self, "last"):
            self.last.reverse()
        return super().release(block_ids)
