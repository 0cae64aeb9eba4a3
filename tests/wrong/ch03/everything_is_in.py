# expect: wrong_state from check_policy_contract(BucketLFU)
patch("return block in self.bucket_of", "return True")
