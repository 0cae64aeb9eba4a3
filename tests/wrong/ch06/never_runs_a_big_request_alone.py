# expect: wrong_state from check_admission(AdmittingScheduler)
patch(" and plan.chunks:", ":")  # even in an empty step: a request bigger than the budget waits
