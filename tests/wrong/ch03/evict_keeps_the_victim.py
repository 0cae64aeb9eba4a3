# expect: wrong_state from check_policy_contract(BucketLFU)
patch("self.forget(block)", "pass")
