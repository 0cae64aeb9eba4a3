# expect: wrong_result from check_policy_contract(EvictReturnsATuple)
from paged_kv.cache.eviction import LRU


class EvictReturnsATuple(LRU):
    def evict(self):
        return super().evict(), "why"
