# expect: work_grows from check_constant_time_release(FreeListPool)
patch("self.free_ids.append(block_id)", "self.free_ids.insert(0, block_id)")
