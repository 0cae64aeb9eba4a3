# expect: wrong_state from check_free_pages(Wrong)
class Wrong(FreeListPool):
    def free_pages(self):
        return list(range(self.num_blocks // self.blocks_per_page))
