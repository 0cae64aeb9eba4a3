# expect: missing_refusal from check_release(FreeListPool)
patch("if not 0 <= block_id < self.num_blocks or", "if block_id >= self.num_blocks or")
