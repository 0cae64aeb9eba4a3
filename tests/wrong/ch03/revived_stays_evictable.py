# expect: wrong_state from check_policy_contract(BucketLFU)
patch("count.\n        self._leave(block)", "count.\n        pass")
