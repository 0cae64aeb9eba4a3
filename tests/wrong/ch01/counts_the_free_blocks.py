# expect: work_grows from check_constant_time_allocate(FreeListPool)
patch("return len(self.free_ids)", "return sum(1 for r in self.ref if r == 0)")
