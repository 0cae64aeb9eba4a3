# expect: wrong_state from check_policy_contract(EverythingIsIn)
from paged_kv.cache.eviction import LRU


class EverythingIsIn(LRU):
    def __contains__(self, block_id):
        return True
