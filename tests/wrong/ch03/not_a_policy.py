# expect: raised
# check: check_policy_contract(NotAPolicy)
class NotAPolicy:
    pass
