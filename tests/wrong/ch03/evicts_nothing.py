# expect: wrong_result from check_policy_contract(EvictsNothing)
from paged_kv.cache.eviction import LRU


class EvictsNothing(LRU):
    def evict(self):
        super().evict()
