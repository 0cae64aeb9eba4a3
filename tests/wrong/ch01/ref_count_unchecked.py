# expect: wrong_error from check_release(Wrong)
class Wrong(FreeListPool):
    def ref_count(self, block_id):
        return self.ref[block_id]
