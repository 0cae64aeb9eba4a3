# expect: wrong_state from check_policy_contract(ForgetKeepsTheCandidate)
from paged_kv.cache.eviction import LRU


class ForgetKeepsTheCandidate(LRU):
    def forget(self, block_id):
        pass
