# expect: wrong_state from check_free_pages(FreeListPool)
patch(" if not any(self.ref[p * per_page : (p + 1) * per_page])", "")
