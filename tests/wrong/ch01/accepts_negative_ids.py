# expect: missing_refusal from check_release(FreeListPool)
# release checks only the top of the range: Python's ref[-1] quietly answers for -1.
patch(
    "            if not 0 <= block_id < self.num_blocks:",
    "            if block_id >= self.num_blocks:",
)
