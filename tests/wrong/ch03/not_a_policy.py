# expect: raised from check_policy_contract(NotAPolicy)
class NotAPolicy:
    pass
