# expect: missing_refusal from check_release(wrong)
from paged_kv import BlockPool


class wrong(BlockPool):
    def release(self, block_ids):
        for b in dict.fromkeys(block_ids):
            while self.ref_count(b) > 1:
                super().release([b])
        return super().release(list(dict.fromkeys(block_ids)))
