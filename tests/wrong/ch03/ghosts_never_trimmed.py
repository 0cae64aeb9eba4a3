# expect: unbounded_memory from check_policy_contract(MyPolicy)
# Remembers the count of every evicted content, for ever.
patch("if len(self.ghosts) > self.max_ghosts:", "if False:")
