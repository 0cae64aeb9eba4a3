# expect: wrong_result from check_policy_contract(Wrong)
# Returns the victim's content key (what its ghosts are keyed by) instead of the block.
class Wrong(MyPolicy):
    def evict(self):
        return self.content_key(super().evict())
