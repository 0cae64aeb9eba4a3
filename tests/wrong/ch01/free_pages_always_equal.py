# expect: wrong_state from check_free_pages(Wrong)
# No page at all, in a list that says it equals anything: the check compares plain values.
class AlwaysEqual(list):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = None


class Wrong(FreeListPool):
    def free_pages(self):
        return AlwaysEqual()
