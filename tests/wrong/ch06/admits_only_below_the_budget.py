# expect: wrong_state from check_admission(AdmittingScheduler)
patch("if cost > plan.budget_left", "if cost >= plan.budget_left")  # an exact fit waits
