# expect: work_grows from check_constant_time_allocate(FreeListPool)
patch("return len(self.free_ids)", "return self.ref.count(0)  # a scan of every block, in C")
