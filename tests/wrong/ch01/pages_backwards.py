# expect: wrong_order from check_free_pages(FreeListPool)
patch("range(self.num_blocks // per_page)", "reversed(range(self.num_blocks // per_page))")
