# expect: wrong_error from check_allocate(FreeListPool)
patch("free = len(self.free_ids)", "free = self.num_blocks")
