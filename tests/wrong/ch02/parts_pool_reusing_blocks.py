# expect: wrong_result from check_parts_so_far(SequenceManager, Wrong)
# A chapter-01 pool that hands a block of one sequence to the next.
class Wrong(BlockPool):
    def allocate(self, n=1):
        return [b % 2 for b in super().allocate(n)]
