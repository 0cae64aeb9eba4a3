# expect: wrong_state from check_policy_contract(LenCountsEveryTrackedBlock)
from paged_kv.cache.eviction import LRU


class LenCountsEveryTrackedBlock(LRU):
    def __init__(self):
        super().__init__()
        self.tracked = set()

    def touch(self, block_id):
        self.tracked.add(block_id)
        super().touch(block_id)

    def __len__(self):
        return len(self.tracked)
