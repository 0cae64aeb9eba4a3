# expect: part_at_fault from check_capstone(Scheduler, parts={"eviction": wrong})
from paged_kv.cache.eviction import LRU


class wrong(LRU):
    """Evicts the block touched last, evictable or not."""

    def __init__(self):
        super().__init__()
        self.last = None

    def touch(self, block_id):
        self.last = block_id
        super().touch(block_id)

    def evict(self):
        victim = self.last if self.last is not None else super().evict()
        self._order.pop(victim, None)
        return victim
