# expect: wrong_result from check_policy_contract(MyPolicy)
patch("return super().evict()", "super().evict()")
