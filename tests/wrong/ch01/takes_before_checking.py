# expect: not_all_or_nothing from check_allocate(Wrong)
# Takes what it can, then refuses (was also catches_the_pop_error: the same mistake).
class Wrong(FreeListPool):
    def allocate(self, n=1):
        ids = [self.free_ids.pop() for _ in range(min(n, len(self.free_ids)))]
        for b in ids:
            self.ref[b] = 1
        if len(ids) < n:
            raise OutOfBlocks("short", requested=n, available=len(ids))
        return ids
