# expect: raised from check_allocate(FreeListPool)
# Refuses when exactly n blocks are free.
patch("if n > len(self.free_ids):", "if n and n >= len(self.free_ids):")
