# expect: wrong_order from check_free_pages(Wrong)
class Wrong(FreeListPool):
    def free_pages(self):
        return super().free_pages()[::-1]
