# expect: missing_refusal from check_release(Wrong)
class Wrong(FreeListPool):
    def ref_count(self, block_id):
        try:
            return self.ref[block_id]
        except Exception:
            return 0
