# expect: missing_refusal from check_release(Wrong)
class Wrong(FreeListPool):
    def ref_count(self, block_id):
        return self.ref[block_id] if 0 <= block_id < self.num_blocks else 0
