# expect: missing_refusal from check_release(FreeListPool)
patch(" or self.ref[block_id] == 0:", ":")
