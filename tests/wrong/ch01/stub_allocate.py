# expect: not_done from check_allocate(Wrong)
class Wrong(FreeListPool):
    def allocate(self, n=1):
        raise NotImplementedError("FreeListPool.allocate: replace this line with your code")
