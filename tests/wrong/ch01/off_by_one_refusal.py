# expect: raised from check_allocate(Wrong)
# Refuses when exactly n blocks are free.
class Wrong(FreeListPool):
    def allocate(self, n=1):
        if n and n >= self.num_free:
            raise OutOfBlocks("short", requested=n, available=self.num_free)
        return super().allocate(n)
