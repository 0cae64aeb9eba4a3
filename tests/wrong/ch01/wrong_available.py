# expect: wrong_error from check_allocate(Wrong)
class Wrong(FreeListPool):
    def allocate(self, n=1):
        if n > self.num_free:
            raise OutOfBlocks("short", requested=n, available=self.num_blocks)
        return super().allocate(n)
