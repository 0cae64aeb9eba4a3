# expect: wrong_state from check_release(Wrong)
# Every count 0, as an int that says it equals anything: the check compares plain values.
class AlwaysEqual(int):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = int.__hash__


class Wrong(FreeListPool):
    def ref_count(self, block_id):
        super().ref_count(block_id)  # (its refusals kept)
        return AlwaysEqual(0)
