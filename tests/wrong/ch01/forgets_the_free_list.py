# expect: wrong_state from check_release(FreeListPool)
patch("                self.free_ids.append(block_id)\n", "")
