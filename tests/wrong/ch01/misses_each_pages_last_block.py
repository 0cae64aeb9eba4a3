# expect: wrong_state from check_free_pages(Wrong)
class Wrong(FreeListPool):
    def free_pages(self):
        per = self.blocks_per_page
        if per is None:
            return []
        pages = range(self.num_blocks // per)
        return [p for p in pages if not any(self.ref[p * per : (p + 1) * per - 1])]
