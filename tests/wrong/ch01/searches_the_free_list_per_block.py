# expect: work_grows from check_free_pages(Wrong)
class Wrong(FreeListPool):
    def free_pages(self):
        per = self.blocks_per_page
        if per is None:
            return []
        pages = range(self.num_blocks // per)
        return [p for p in pages if all(b in self.free_ids for b in range(p * per, (p + 1) * per))]
