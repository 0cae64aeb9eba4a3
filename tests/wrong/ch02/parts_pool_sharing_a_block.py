# expect: wrong_result from check_parts_so_far(SequenceManager, Wrong)
# A chapter-01 pool whose allocate hands out a block that is still in use (was also
# parts_pool_reusing_blocks: the same mistake).
class Wrong(BlockPool):
    def allocate(self, n=1):
        return [0 if b == 1 else b for b in super().allocate(n)]
