# expect: wrong_result from check_policy_contract(MyPolicy)
patch("return super().evict()", "return [super().evict()]")
