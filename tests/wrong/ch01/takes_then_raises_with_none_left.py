# expect: not_all_or_nothing
# check: check_allocate(Wrong)
class Wrong(FreeListPool):
    def allocate(self, n=1):
        ids = []
        for _ in range(n):
            if not self.free_ids:
                raise OutOfBlocks("short", requested=n, available=0)
            ids.append(self.free_ids.pop())
        for b in ids:
            self.ref[b] = 1
        return ids
