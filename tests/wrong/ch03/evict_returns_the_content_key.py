# expect: wrong_result from check_policy_contract(MyPolicy)
# The victim's content key (what its ghosts are keyed by) instead of the block.
patch("return super().evict()", "return self.content_key(super().evict())")
