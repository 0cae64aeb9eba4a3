# expect: wrong_state from check_allocate(FreeListPool)
patch("self.ref[block_id] = 1", "pass")
