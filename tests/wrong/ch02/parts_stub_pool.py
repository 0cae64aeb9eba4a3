# expect: not_done from check_parts_so_far(SequenceManager, Wrong)
class Wrong(BlockPool):
    def allocate(self, n=1):
        raise NotImplementedError("FreeListPool.allocate: replace this line with your code")
