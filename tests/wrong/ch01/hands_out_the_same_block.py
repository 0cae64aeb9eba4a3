# expect: wrong_result from check_allocate(Wrong)
class Wrong(FreeListPool):
    def allocate(self, n=1):
        if n > self.num_free:
            raise OutOfBlocks("short", requested=n, available=self.num_free)
        block = self.free_ids.pop()
        self.ref[block] = 1
        return [block] * n if n else []
