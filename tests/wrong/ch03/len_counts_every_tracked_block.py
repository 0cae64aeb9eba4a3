# expect: wrong_state from check_policy_contract(BucketLFU)
patch("return len(self.bucket_of)", "return len(self.counts)")
