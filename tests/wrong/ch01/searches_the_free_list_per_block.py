# expect: work_grows from check_free_pages(FreeListPool)
patch(
    "if not any(self.ref[p * per_page : (p + 1) * per_page])",
    "if all(b in self.free_ids for b in range(p * per_page, (p + 1) * per_page))",
)
