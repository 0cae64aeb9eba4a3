# expect: wrong_state from check_policy_contract(RevivedStaysEvictable)
from paged_kv.cache.eviction import LRU


class RevivedStaysEvictable(LRU):
    def revive(self, block_id):
        pass
