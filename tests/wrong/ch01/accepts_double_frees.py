# expect: missing_refusal from check_release(FreeListPool)
patch("if count > self.ref[block_id]:", "if False:")
