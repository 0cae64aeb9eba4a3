# expect: wrong_state from check_allocate(Wrong)
class Wrong(FreeListPool):
    def allocate(self, n=1):
        if n > self.num_free:
            raise OutOfBlocks("short", requested=n, available=self.num_free)
        return [self.free_ids.pop() for _ in range(n)]
