# expect: wrong_result from check_policy_contract(EvictReturnsAList)
from paged_kv.cache.eviction import LRU


class EvictReturnsAList(LRU):
    def evict(self):
        return [super().evict()]
