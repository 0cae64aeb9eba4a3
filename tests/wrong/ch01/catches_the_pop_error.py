# expect: not_all_or_nothing from check_allocate(Wrong)
class Wrong(FreeListPool):
    def allocate(self, n=1):
        try:
            ids = [self.free_ids.pop() for _ in range(n)]
        except IndexError:
            raise OutOfBlocks("short", requested=n, available=len(self.free_ids)) from None
        for b in ids:
            self.ref[b] = 1
        return ids
