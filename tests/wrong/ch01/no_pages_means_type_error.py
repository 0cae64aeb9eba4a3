# expect: raised from check_free_pages(Wrong)
class Wrong(FreeListPool):
    def free_pages(self):
        per = self.blocks_per_page
        return [
            p for p in range(self.num_blocks // per) if not any(self.ref[p * per : (p + 1) * per])
        ]
