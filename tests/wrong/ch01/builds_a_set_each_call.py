# expect: work_grows from check_constant_time_release(FreeListPool)
# Work in C the counters cannot see (a set built from a range on each call): the timing backstop.
patch(
    "            if not 0 <= block_id < self.num_blocks:",
    "            if block_id not in set(range(self.num_blocks)):",
)
