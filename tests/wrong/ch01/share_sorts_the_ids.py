# expect: mutates_argument from check_release(Wrong)
class Wrong(FreeListPool):
    def share(self, block_ids):
        block_ids.sort()
        super().share(block_ids)
