# expect: part_at_fault from check_capstone(Scheduler, parts={"eviction": wrong})
from paged_kv.cache.eviction import LRU


class wrong(LRU):
    def revive(self, block_id):  # a block taken back into use stays a candidate for eviction
        pass
