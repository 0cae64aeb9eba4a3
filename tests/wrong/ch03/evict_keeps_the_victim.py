# expect: wrong_state from check_policy_contract(EvictKeepsTheVictim)
from paged_kv.cache.eviction import LRU


class EvictKeepsTheVictim(LRU):
    def evict(self):
        return next(iter(self._order))
